package policies

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Factory builds a Picker from its configuration parameters. It decodes them
// strictly (see DecodeParams) and returns an error naming any bad field.
type Factory func(params map[string]any) (Picker, error)

// Registry maps policy names, as written in the config, to factories. It is
// built in main and filled explicitly; there is no global registry.
type Registry struct {
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Register adds a named factory. Registering a name twice is an error.
func (r *Registry) Register(name string, f Factory) error {
	if name == "" || f == nil {
		return errors.New("policies: register needs a name and a factory")
	}
	if _, dup := r.factories[name]; dup {
		return fmt.Errorf("policies: %q registered twice", name)
	}
	r.factories[name] = f
	return nil
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// UnknownPolicyError reports a policy name that is not registered.
type UnknownPolicyError struct {
	Name  string
	Known []string
}

func (e *UnknownPolicyError) Error() string {
	return fmt.Sprintf("unknown policy %q (known: %v)", e.Name, e.Known)
}

// New builds the named policy with params.
func (r *Registry) New(name string, params map[string]any) (Picker, error) {
	f, ok := r.factories[name]
	if !ok {
		return nil, &UnknownPolicyError{Name: name, Known: r.Names()}
	}
	return f(params)
}

// DecodeParams decodes params into dst (a pointer to a struct with yaml
// tags), rejecting unknown fields and wrong types with the field's name.
func DecodeParams(params map[string]any, dst any) error {
	if len(params) == 0 {
		return nil
	}
	b, err := yaml.Marshal(params)
	if err != nil {
		return fmt.Errorf("params: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) {
		if k := badKey(params, dst); k != "" {
			return fmt.Errorf("params: field %s: %w", k, err)
		}
		return fmt.Errorf("params: %w", err)
	}
	return nil
}

// badKey finds the first key (in sorted order) that fails to decode on its
// own into a fresh value of dst's type, so an error can name the field
// (yaml reports a wrong type by line and value only). It returns "" when
// no single key fails.
func badKey(params map[string]any, dst any) string {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		b, err := yaml.Marshal(map[string]any{k: params[k]})
		if err != nil {
			return k
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(reflect.New(t.Elem()).Interface()); err != nil && !errors.Is(err, io.EOF) {
			return k
		}
	}
	return ""
}
