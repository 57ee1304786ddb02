package configs

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lineRef matches the "line N:" prefix the YAML decoder puts on each error.
var lineRef = regexp.MustCompile(`line (\d+):`)

// unknownField matches what follows "line N:" for a key the config lacks.
var unknownField = regexp.MustCompile(`^ field (\S+) not found`)

// nameFields rewrites "line N:" in a decoder message to "line N (field.path):",
// so a type error names the field as validation errors do. An unknown key
// on a line of several (flow style: {a: 1, b: 2}) is named itself, not the
// line's last key.
func nameFields(root *yaml.Node, msg string) string {
	paths := map[int]string{}
	var keys []keyAt // every key, for unknown ones on a shared line
	collectPaths(root, "", paths, &keys)
	lines := strings.Split(msg, "\n")
	for i, line := range lines {
		loc := lineRef.FindStringSubmatchIndex(line)
		if loc == nil {
			continue
		}
		n, _ := strconv.Atoi(line[loc[2]:loc[3]])
		p := paths[n]
		if m := unknownField.FindStringSubmatch(line[loc[1]:]); m != nil {
			for _, k := range keys {
				if k.line == n && k.key == m[1] {
					p = k.path
					break
				}
			}
		}
		if p != "" {
			lines[i] = line[:loc[0]] + fmt.Sprintf("line %d (%s):", n, p) + line[loc[1]:]
		}
	}
	return strings.Join(lines, "\n")
}

// keyAt is a mapping key: its line, its name and its field path.
type keyAt struct {
	line      int
	key, path string
}

// collectPaths records, for each line holding a key or a sequence item, the
// deepest field path that starts there, and every key in keys.
func collectPaths(n *yaml.Node, path string, out map[int]string, keys *[]keyAt) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectPaths(c, path, out, keys)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			out[k.Line] = p
			*keys = append(*keys, keyAt{line: k.Line, key: k.Value, path: p})
			collectPaths(v, p, out, keys)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := out[c.Line]; !ok || c.Kind != yaml.ScalarNode {
				out[c.Line] = p
			}
			collectPaths(c, p, out, keys)
		}
	}
}
