package configs

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// configs/example.yaml is the reference users copy from: it loads, and its
// model's admission block names every admission setting.
func TestExampleLoadsAndNamesEveryAdmissionSetting(t *testing.T) {
	_, err := Load("example.yaml")
	require.NoError(t, err)
	raw, err := os.ReadFile("example.yaml")
	require.NoError(t, err)
	var doc struct {
		Models []struct {
			Admission map[string]any `yaml:"admission"`
		} `yaml:"models"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.Models)
	var named []string
	for k := range doc.Models[0].Admission {
		named = append(named, k)
	}
	var want []string
	at := reflect.TypeFor[Admission]()
	for i := range at.NumField() {
		want = append(want, strings.Split(at.Field(i).Tag.Get("yaml"), ",")[0])
	}
	slices.Sort(named)
	slices.Sort(want)
	assert.Equal(t, want, named)
}
