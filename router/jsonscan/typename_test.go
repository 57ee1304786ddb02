package jsonscan_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/router/jsonscan"
)

func TestTypeName(t *testing.T) {
	for v, want := range map[any]string{
		"": "a string", true: "a boolean", int64(0): "an integer", uint8(0): "an integer", 1.5: "a number",
		new(int): "an integer", struct{}{}: "an object", [1]int{}: "an array", make(chan int): "another type",
	} {
		assert.Equal(t, want, jsonscan.TypeName(reflect.TypeOf(v)), "%T", v)
	}
	assert.Equal(t, "an array", jsonscan.TypeName(reflect.TypeFor[[]string]()))
	assert.Equal(t, "an object", jsonscan.TypeName(reflect.TypeFor[map[string]int]()))
}
