package configs

import (
	"fmt"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// lineRef matches the "line N:" prefix the YAML decoder puts on each error.
var lineRef = regexp.MustCompile(`line (\d+):`)

// nameFields rewrites "line N:" in a decoder message to "line N (field.path):",
// so a type error names the field as validation errors do.
func nameFields(root *yaml.Node, msg string) string {
	paths := map[int]string{}
	collectPaths(root, "", paths)
	return lineRef.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(lineRef.FindStringSubmatch(m)[1])
		if p, ok := paths[n]; ok && p != "" {
			return fmt.Sprintf("line %d (%s):", n, p)
		}
		return m
	})
}

// collectPaths records, for each line holding a key or a sequence item, the
// deepest field path that starts there.
func collectPaths(n *yaml.Node, path string, out map[int]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectPaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			out[k.Line] = p
			collectPaths(v, p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := out[c.Line]; !ok || c.Kind != yaml.ScalarNode {
				out[c.Line] = p
			}
			collectPaths(c, p, out)
		}
	}
}
