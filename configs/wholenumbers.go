package configs

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// wholeNumbers refuses a number with a fraction (or out of range) where the
// config holds an integer: the YAML decoder truncates it silently, so that
// `requests_per_minute: 0.5` read as 0, no limit at all, and `weight: 2.7`
// as 2. n is the document's node, t the type it decodes into.
func wholeNumbers(n *yaml.Node, t reflect.Type) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return checkWhole(n, t, "")
}

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func checkWhole(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		return nil // decodes itself (Duration)
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!float" {
			return nil // an int, or not a number: the decoder says
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return fmt.Errorf("line %d (%s): must be a whole number, got %s", n.Line, path, n.Value)
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		fields := map[string]reflect.Type{}
		yamlFields(t, fields)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if ft, ok := fields[n.Content[i].Value]; ok {
				if err := checkWhole(n.Content[i+1], ft, join(path, n.Content[i].Value)); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkWhole(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, e := range n.Content {
			if err := checkWhole(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlFields maps the YAML names of struct type t's fields (those of
// inlined structs included) to their types.
func yamlFields(t reflect.Type, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			yamlFields(f.Type, out)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
