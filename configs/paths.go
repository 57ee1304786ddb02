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
	collectPaths(root, "", paths)
	var keys []string // every key's path, for unknown ones on a shared line
	collectKeys(root, "", &keys)
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
				if strings.HasPrefix(k, fmt.Sprintf("%d:", n)) && (strings.HasSuffix(k, ":"+m[1]) || strings.HasSuffix(k, "."+m[1])) {
					p = k[strings.IndexByte(k, ':')+1:]
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

// collectKeys lists every mapping key's path as "LINE:path".
func collectKeys(n *yaml.Node, path string, out *[]string) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p = fmt.Sprintf("%s[%d]", path, i)
			}
			collectKeys(c, p, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			*out = append(*out, fmt.Sprintf("%d:%s", k.Line, p))
			collectKeys(n.Content[i+1], p, out)
		}
	}
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
