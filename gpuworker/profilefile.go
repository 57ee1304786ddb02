package gpuworker

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// profileFile is the YAML document LoadProfiles reads:
//
//	profiles:
//	  - name: h100-llama3-8b        # a built-in name overrides its fields
//	    eta_bw: 0.7
//	  - name: h200-llama3-8b-fp8    # a new name starts from base, if given
//	    base: h100-llama3-8b
//	    hbm_bytes: 141e9
//	    bandwidth_bytes_per_s: 4.8e12
type profileFile struct {
	Profiles []profileSpec `yaml:"profiles"`
}

// profileSpec is one profile in a file. Nil fields keep the value of the
// base profile.
type profileSpec struct {
	Name  string  `yaml:"name"`
	Base  string  `yaml:"base"`
	GPU   *string `yaml:"gpu"`
	Model *string `yaml:"model"`

	TP              *int     `yaml:"tp"`
	HBMBytes        *float64 `yaml:"hbm_bytes"`
	BandwidthBytes  *float64 `yaml:"bandwidth_bytes_per_s"`
	FLOPS           *float64 `yaml:"flops"`
	WeightBytes     *float64 `yaml:"weight_bytes"`
	KVBytesPerToken *float64 `yaml:"kv_bytes_per_token"`
	Params          *float64 `yaml:"params"`
	Layers          *int     `yaml:"layers"`
	Hidden          *int     `yaml:"hidden"`

	MaxNumSeqs       *int           `yaml:"max_num_seqs"`
	MaxBatchedTokens *int           `yaml:"max_batched_tokens"`
	GPUUtil          *float64       `yaml:"gpu_util"`
	ActivationBytes  *float64       `yaml:"activation_bytes"`
	EtaBW            *float64       `yaml:"eta_bw"`
	MFU              *float64       `yaml:"mfu"`
	StepOverhead     *time.Duration `yaml:"step_overhead"`
	FixedKVTokens    *int           `yaml:"fixed_kv_tokens"`
	HostPerSeq       *time.Duration `yaml:"host_per_seq"`
	WholePrefill     *bool          `yaml:"whole_prefill"`
}

// LoadProfiles reads a YAML file of profiles (a top-level "profiles" list;
// unknown fields are errors). A profile whose name is a built-in overrides
// only the fields it sets; a new name starts from the profile named by
// "base" (a built-in or one earlier in the file), or from the defaults of a
// one-GPU vLLM engine without base, and must then give the hardware and model
// fields. Byte, FLOP and bandwidth figures are per GPU except weight_bytes
// and kv_bytes_per_token, which are whole-model. Errors name the profile and
// field.
func LoadProfiles(r io.Reader) ([]Profile, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var f profileFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("profiles: %w", err)
	}
	known := NewProfileSet(nil)
	out := make([]Profile, 0, len(f.Profiles))
	seen := map[string]bool{}
	for i, s := range f.Profiles {
		where := fmt.Sprintf("profiles[%d]", i)
		if s.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		where = fmt.Sprintf("%s (%q)", where, s.Name)
		if seen[s.Name] {
			return nil, fmt.Errorf("%s: name: duplicate profile", where)
		}
		seen[s.Name] = true
		p, err := s.start(known)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		s.apply(&p)
		if err := checkProfile(p); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, p)
		known = known.with(p)
	}
	return out, nil
}

// start returns the profile s modifies.
func (s profileSpec) start(known ProfileSet) (Profile, error) {
	if s.Base != "" {
		p, err := known.Lookup(s.Base)
		if err != nil {
			return Profile{}, fmt.Errorf("base: %w", err)
		}
		p.Name = s.Name
		return p, nil
	}
	if p, err := known.Lookup(s.Name); err == nil {
		return p, nil
	}
	return withDefaults(Profile{Name: s.Name, TP: 1}, false, time.Millisecond), nil
}

// apply sets the fields s gives.
func (s profileSpec) apply(p *Profile) {
	set(&p.GPU, s.GPU)
	set(&p.Model, s.Model)
	set(&p.TP, s.TP)
	set(&p.HBMBytes, s.HBMBytes)
	set(&p.BandwidthBytes, s.BandwidthBytes)
	set(&p.FLOPS, s.FLOPS)
	set(&p.WeightBytes, s.WeightBytes)
	set(&p.KVBytesPerToken, s.KVBytesPerToken)
	set(&p.Params, s.Params)
	set(&p.Layers, s.Layers)
	set(&p.Hidden, s.Hidden)
	set(&p.MaxNumSeqs, s.MaxNumSeqs)
	set(&p.MaxBatchedTokens, s.MaxBatchedTokens)
	set(&p.GPUUtil, s.GPUUtil)
	set(&p.ActivationBytes, s.ActivationBytes)
	set(&p.EtaBW, s.EtaBW)
	set(&p.MFU, s.MFU)
	set(&p.StepOverhead, s.StepOverhead)
	set(&p.FixedKVTokens, s.FixedKVTokens)
	set(&p.HostPerSeq, s.HostPerSeq)
	set(&p.WholePrefill, s.WholePrefill)
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// checkProfile validates a file profile, naming the first bad field by its
// YAML key.
func checkProfile(p Profile) error {
	type check struct {
		field string
		bad   bool
		want  string
	}
	fixed := p.FixedKVTokens > 0
	checks := []check{
		{"tp", p.TP < 1, "at least 1"},
		{"hbm_bytes", !fixed && p.HBMBytes <= 0, "positive"},
		{"bandwidth_bytes_per_s", p.BandwidthBytes < 0, "zero (no memory cost) or positive"},
		{"flops", p.FLOPS < 0, "zero (no compute cost) or positive"},
		{"weight_bytes", p.WeightBytes < 0, "zero or positive"},
		{"kv_bytes_per_token", !fixed && p.KVBytesPerToken <= 0, "positive"},
		{"params", p.Params < 0, "zero or positive"},
		{"layers", p.Layers < 0, "zero or positive"},
		{"hidden", p.Hidden < 0, "zero or positive"},
		{"max_num_seqs", p.MaxNumSeqs < 1, "at least 1"},
		{"max_batched_tokens", p.MaxBatchedTokens < 1, "at least 1"},
		{"gpu_util", !fixed && (p.GPUUtil <= 0 || p.GPUUtil > 1), "in (0, 1]"},
		{"activation_bytes", p.ActivationBytes < 0, "zero or positive"},
		{"eta_bw", p.BandwidthBytes > 0 && (p.EtaBW <= 0 || p.EtaBW > 1), "in (0, 1] when bandwidth_bytes_per_s is set"},
		{"mfu", p.FLOPS > 0 && (p.MFU <= 0 || p.MFU > 1), "in (0, 1] when flops is set"},
		{"step_overhead", p.StepOverhead < 0, "zero or positive"},
		{"fixed_kv_tokens", p.FixedKVTokens < 0, "zero (derive from memory) or positive"},
		{"host_per_seq", p.HostPerSeq < 0, "zero or positive"},
	}
	for _, c := range checks {
		if c.bad {
			return fmt.Errorf("%s: must be %s", c.field, c.want)
		}
	}
	if p.KVBlocks() < 1 {
		return fmt.Errorf("weight_bytes: model does not fit: hbm_bytes*gpu_util - weight_bytes/tp - activation_bytes leaves no KV cache")
	}
	return p.Validate()
}

// ProfileSet is an immutable set of profiles: the built-ins plus any
// loaded from a file, which replace built-ins of the same name.
type ProfileSet struct {
	profiles []Profile
}

// NewProfileSet returns the built-in profiles merged with extra; an extra
// profile replaces a built-in of the same name, and new names follow the
// built-ins in the order given. It copies extra.
func NewProfileSet(extra []Profile) ProfileSet {
	s := ProfileSet{profiles: Profiles()}
	for _, p := range extra {
		s = s.with(p)
	}
	return s
}

// with returns a copy of s with p added or replaced.
func (s ProfileSet) with(p Profile) ProfileSet {
	out := slices.Clone(s.profiles)
	if i := slices.IndexFunc(out, func(q Profile) bool { return q.Name == p.Name }); i >= 0 {
		out[i] = p
	} else {
		out = append(out, p)
	}
	return ProfileSet{profiles: out}
}

// Lookup returns the profile with the given name.
func (s ProfileSet) Lookup(name string) (Profile, error) {
	for _, p := range s.profiles {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("%w %q", ErrUnknownProfile, name)
}

// All returns every profile, built-ins first, in a fresh slice.
func (s ProfileSet) All() []Profile { return slices.Clone(s.profiles) }

// LoadProfileSet reads a profile file with LoadProfiles and merges it with
// the built-ins.
func LoadProfileSet(r io.Reader) (ProfileSet, error) {
	extra, err := LoadProfiles(r)
	if err != nil {
		return ProfileSet{}, err
	}
	return NewProfileSet(extra), nil
}
