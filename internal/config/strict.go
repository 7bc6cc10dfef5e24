package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// oneDocument parses data as YAML and returns its document. A stream of
// several documents is an error: a decoder reads the first one only, so a
// key in a later document (an auth: after a ---) would be dropped without a
// word. An empty document after a final --- is refused too: agentd reads a
// file of exactly one document.
func oneDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("config: %s", cleanYAMLError(err))
	}
	var next yaml.Node
	err := dec.Decode(&next)
	switch {
	case errors.Is(err, io.EOF):
		return &doc, nil
	case err != nil:
		return nil, fmt.Errorf("config: after the first YAML document: %s", cleanYAMLError(err))
	}
	what := "a second YAML document"
	if lineStartsWith(data, next.Line, "---") {
		what += ` ("---")`
	}
	return nil, fmt.Errorf("config: line %d: %s; agentd reads one", next.Line, what)
}

// lineStartsWith reports whether line n (from 1) of data starts with prefix.
func lineStartsWith(data []byte, n int, prefix string) bool {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return false
		}
		data = data[j+1:]
	}
	return n >= 1 && bytes.HasPrefix(data, []byte(prefix))
}

// cannotUnmarshal is yaml's type error, e.g.
// "line 2: cannot unmarshal !!str `ten` into int", or one of a value's own
// decoder (Millis) that adds why after a "; ".
var cannotUnmarshal = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal (\\S+)(?: `(.*)`)? into ([^\\s;]+)(?:; (.*))?$")

// describeYAMLError is cleanYAMLError with each type error rewritten to
// name the key it is about, found by walking the document's node tree along
// the Config type, e.g. `retry.max_retries: "ten" is not an integer (line 2)`.
func describeYAMLError(err error, doc *yaml.Node) string {
	var te *yaml.TypeError
	if doc == nil || !errors.As(err, &te) {
		return cleanYAMLError(err)
	}
	// yaml reports in document order: when several values look alike, the
	// n-th error is about the n-th of them.
	used := map[*yaml.Node]bool{}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		msgs[i] = describeTypeError(e, doc, used)
	}
	return cleanYAMLError(&yaml.TypeError{Errors: msgs})
}

func describeTypeError(e string, doc *yaml.Node, used map[*yaml.Node]bool) string {
	m := cannotUnmarshal.FindStringSubmatch(e)
	if m == nil {
		return e
	}
	line, _ := strconv.Atoi(m[1])
	tag, shown, into, reason := m[2], m[3], m[4], m[5]
	path, ok := keyAt(doc, reflect.TypeFor[Config](), "", func(n *yaml.Node, t reflect.Type) bool {
		if used[n] || n.Line != line || n.ShortTag() != tag || t.String() != into && derefType(t).String() != into {
			return false
		}
		if tag != "!!seq" && tag != "!!map" {
			// yaml shows a long value's first 7 characters and "...".
			if p, cut := strings.CutSuffix(shown, "..."); cut && len(n.Value) > 10 {
				if !strings.HasPrefix(n.Value, p) {
					return false
				}
			} else if n.Value != shown {
				return false
			}
		}
		used[n] = true
		return true
	})
	if !ok {
		return e
	}
	if path == "" {
		path = "the configuration"
	}
	var got string
	switch tag {
	case "!!seq":
		got = "a list"
	case "!!map":
		got = "a mapping"
	default:
		// The value as yaml shows it: never more than its first 7
		// characters when it is long.
		got = strconv.Quote(shown)
	}
	if reason != "" {
		return fmt.Sprintf("%s: %s %s (line %d)", path, got, reason, line)
	}
	return fmt.Sprintf("%s: %s is not %s (line %d)", path, got, typeWords(into), line)
}

// plainKey is a key written as is in a key path; others are quoted.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// keyAt walks the node tree below n, which decodes into a value of type t at
// key path path, and returns the key path of the first value node that
// match accepts, e.g. "providers[0].credentials[1].banked_resets". Keys
// that are no field of t are skipped: yaml decodes nothing there.
func keyAt(n *yaml.Node, t reflect.Type, path string, match func(*yaml.Node, reflect.Type) bool) (string, bool) {
	visit := func(v *yaml.Node, vt reflect.Type, p string) (string, bool) {
		if match(v, vt) {
			return p, true
		}
		return keyAt(v, vt, p, match)
	}
	t = derefType(t)
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p, ok := visit(c, t, path); ok {
				return p, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			var vt reflect.Type
			switch t.Kind() {
			case reflect.Struct:
				vt = fieldType(t, k)
			case reflect.Map:
				vt = t.Elem()
			}
			if vt == nil {
				continue
			}
			p := k
			switch {
			case !plainKey.MatchString(k):
				p = path + "[" + strconv.Quote(k) + "]"
			case path != "":
				p = path + "." + k
			}
			if p, ok := visit(n.Content[i+1], vt, p); ok {
				return p, true
			}
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return "", false
		}
		for i, v := range n.Content {
			if p, ok := visit(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	}
	return "", false
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldType is the type of the field of struct type t that YAML key k
// decodes into, or nil.
func fieldType(t reflect.Type, k string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == k && name != "-" && f.IsExported() {
			return f.Type
		}
	}
	return nil
}

// typeWords says what a Go type of the configuration wants, for a reader of
// the YAML file.
func typeWords(goType string) string {
	switch {
	case goType == millisType:
		return "a number of milliseconds or a duration such as 500ms or 1h30m"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "config."):
		return "a mapping"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	}
	return "a " + goType
}

var (
	// wholeRef is a value that is one ${...} reference.
	wholeRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)?[^{}]*\}$`)
	// innerRef is a ${NAME} (or ${NAME:-default} …) inside a longer value.
	innerRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?:[-:?+=][^{}]*)?\}`)
	// bareRef is a value that is one $NAME reference.
	bareRef = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
	// envStyle is a $NAME written as environment variables are: upper
	// case, digits and underscores.
	envStyle = regexp.MustCompile(`^\$[A-Z_][A-Z0-9_]*$`)
)

// notExpanded refuses a secret (api_key, token) that is an environment
// variable reference: agentd does not expand ${VAR} or $VAR, so such a value
// would be used as the secret itself. The error points at envKey, the key
// that names a variable. It shows the value only when it is a reference
// through and through (not a secret); otherwise it shows nothing of it.
func notExpanded(key, value, envKey string) error {
	if !strings.Contains(value, "$") {
		return nil
	}
	hint := "put the variable's name in " + envKey
	if m := wholeRef.FindStringSubmatch(value); m != nil {
		if m[1] != "" {
			hint = fmt.Sprintf("put the variable's name in %s (%s: %s)", envKey, envKey, m[1])
		}
		return fmt.Errorf("config: %s: %q is not expanded; %s", key, value, hint)
	}
	if m := bareRef.FindStringSubmatch(value); m != nil {
		if envStyle.MatchString(value) {
			return fmt.Errorf("config: %s: %q is not expanded; put the variable's name in %s (%s: %s)", key, value, envKey, envKey, m[1])
		}
		return fmt.Errorf("config: %s: looks like a $VARIABLE, which is not expanded; %s", key, hint)
	}
	if innerRef.MatchString(value) {
		return fmt.Errorf("config: %s: holds a ${VARIABLE}, which is not expanded; %s", key, hint)
	}
	return nil
}

// envName refuses a *_env key written as a reference ($NAME or ${NAME})
// instead of the variable's name.
func envName(key, name string) error {
	if !strings.HasPrefix(name, "$") {
		return nil
	}
	bare := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "$"), "{"), "}")
	return fmt.Errorf("config: %s: %q: write the variable's name, without \"$\" (%s: %s)", key, name, key[strings.LastIndex(key, ".")+1:], bare)
}
