package jsonscan

import (
	"reflect"
	"strings"
)

// TypeName names a Go type the way a JSON client thinks of it ("a string",
// "an integer"...), for errors that say what a member should have been.
func TypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another type"
}

// ValueName names the JSON value a json.UnmarshalTypeError found (its
// Value: "string", "number 5.5", "bool", ...) as OpenAI's messages do: "a
// string", "a number", "a boolean".
func ValueName(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	switch kind {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "a boolean"
	case "object":
		return "an object"
	case "array":
		return "an array"
	case "null":
		return "null"
	}
	return "another type"
}
