package moe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/jsonpos"
)

// HFConfig is the MoE layer of a Hugging Face model's config.json.
type HFConfig struct {
	Name      string // the model's name: _name_or_path's last element, else the file's folder
	ModelType string // model_type ("qwen3_moe", "deepseek_v3", "mixtral", ...)
	Shape     Shape  // global (unsharded)
	// From names the key each size came from, by field: "experts", "topk",
	// "hidden", "inter".
	From map[string]string
	// Router settings where the config has them (zero: absent).
	NormTopKProb *bool   // norm_topk_prob
	NGroup       int     // n_group
	TopKGroup    int     // topk_group
	Scaling      float64 // routed_scaling_factor
	ScoringFunc  string  // scoring_func ("softmax", "sigmoid")
}

// HFConfigError is a config.json that does not give a MoE shape: a key
// missing, malformed, or contradicting another. The CLI exits 2 for it.
type HFConfigError struct {
	File string
	Key  string // the key at fault (or keys, "a/b", when two disagree)
	Msg  string
}

func (e *HFConfigError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.File, e.Key, e.Msg)
}

// The names the common MoE configs use for each size, in order of
// preference. Intermediate: moe_intermediate_size (Qwen2/3-MoE, DeepSeek,
// where intermediate_size is the dense MLP's), else intermediate_size
// (Mixtral, whose experts are the whole MLP).
var (
	hfExpertKeys = []string{"num_experts", "num_local_experts", "n_routed_experts"}
	hfTopKKeys   = []string{"num_experts_per_tok", "experts_per_token", "moe_top_k"}
	hfHiddenKeys = []string{"hidden_size"}
	hfInterKeys  = []string{"moe_intermediate_size", "intermediate_size"}
)

// ReadHFConfig reads a config.json (or a folder holding one).
func ReadHFConfig(path string) (HFConfig, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return HFConfig{}, err // names the path
	}
	return ParseHFConfig(b, path)
}

// ParseHFConfig reads the MoE shape from a config.json's bytes; file names
// it in errors. A multimodal config's "text_config" is read when the top
// level has no expert count.
func ParseHFConfig(b []byte, file string) (HFConfig, error) {
	top, err := decodeObject(b)
	if err != nil {
		return HFConfig{}, &HFConfigError{File: file, Key: "(file)", Msg: "not one JSON object: " + err.Error()}
	}
	// The decoder keeps a repeated key's last value without a word (as
	// Python's json does); a file that says two things of one key is more
	// likely a bad edit than a choice, so it is refused.
	if path, first, dup := jsonpos.DuplicateKey(b); dup >= 0 {
		switch r := []rune(path); {
		case path == "":
			path = `""`
		case len(r) > 60:
			path = "…" + string(r[len(r)-59:])
		}
		line, col := jsonpos.Position(b, dup)
		fl, fc := jsonpos.Position(b, first)
		return HFConfig{}, &HFConfigError{File: file, Key: path,
			Msg: fmt.Sprintf("line %d, column %d: duplicate key (first at line %d, column %d): give it once", line, col, fl, fc)}
	}
	obj, prefix := top, ""
	if !hasAny(top, hfExpertKeys) {
		if tc, ok := top["text_config"]; ok {
			if inner, err := decodeObject(tc); err == nil && hasAny(inner, hfExpertKeys) {
				obj, prefix = inner, "text_config."
			}
		}
	}
	c := HFConfig{From: map[string]string{}}
	fields := []struct {
		field string
		keys  []string
		dst   *int
		// all: every listed key present must agree (they are synonyms);
		// otherwise the first present wins (the later ones mean something
		// else when the first is there).
		all bool
	}{
		{"experts", hfExpertKeys, &c.Shape.E, true},
		{"topk", hfTopKKeys, &c.Shape.K, true},
		{"hidden", hfHiddenKeys, &c.Shape.H, true},
		{"inter", hfInterKeys, &c.Shape.I, false},
	}
	for _, f := range fields {
		found := ""
		for _, k := range f.keys {
			raw, ok := obj[k]
			if !ok || string(raw) == "null" {
				continue
			}
			v, err := positiveInt(raw)
			if err != nil {
				return HFConfig{}, &HFConfigError{File: file, Key: prefix + k, Msg: err.Error()}
			}
			if found == "" {
				*f.dst, found = v, k
				if !f.all {
					break
				}
				continue
			}
			if v != *f.dst {
				return HFConfig{}, &HFConfigError{File: file, Key: prefix + found + "/" + prefix + k,
					Msg: fmt.Sprintf("contradictory: %s is %d but %s is %d", found, *f.dst, k, v)}
			}
		}
		if found == "" {
			msg := "missing: the config has none of " + strings.Join(f.keys, ", ")
			if f.field == "experts" {
				msg += " (is it a mixture-of-experts model?)"
			}
			return HFConfig{}, &HFConfigError{File: file, Key: prefix + f.keys[0], Msg: msg}
		}
		c.From[f.field] = prefix + found
	}
	if c.Shape.K > c.Shape.E {
		return HFConfig{}, &HFConfigError{File: file, Key: prefix + c.From["topk"] + "/" + prefix + c.From["experts"],
			Msg: fmt.Sprintf("contradictory: %d experts per token of %d experts", c.Shape.K, c.Shape.E)}
	}
	// Router settings: optional, but malformed is still an error.
	if raw, ok := obj["norm_topk_prob"]; ok && string(raw) != "null" {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return HFConfig{}, &HFConfigError{File: file, Key: prefix + "norm_topk_prob", Msg: "want true or false, got " + string(raw)}
		}
		c.NormTopKProb = &v
	}
	for _, o := range []struct {
		key string
		dst *int
	}{{"n_group", &c.NGroup}, {"topk_group", &c.TopKGroup}} {
		if raw, ok := obj[o.key]; ok && string(raw) != "null" {
			v, err := positiveInt(raw)
			if err != nil {
				return HFConfig{}, &HFConfigError{File: file, Key: prefix + o.key, Msg: err.Error()}
			}
			*o.dst = v
		}
	}
	if c.NGroup > 0 && c.Shape.E%c.NGroup != 0 {
		return HFConfig{}, &HFConfigError{File: file, Key: prefix + "n_group/" + prefix + c.From["experts"],
			Msg: fmt.Sprintf("contradictory: %d groups do not divide %d experts", c.NGroup, c.Shape.E)}
	}
	if raw, ok := obj["routed_scaling_factor"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &c.Scaling); err != nil || c.Scaling <= 0 {
			return HFConfig{}, &HFConfigError{File: file, Key: prefix + "routed_scaling_factor", Msg: "want a positive number, got " + string(raw)}
		}
	}
	json.Unmarshal(obj["scoring_func"], &c.ScoringFunc)
	json.Unmarshal(obj["model_type"], &c.ModelType)
	if c.ModelType == "" {
		json.Unmarshal(top["model_type"], &c.ModelType)
	}
	c.Name = hfName(top, file)
	return c, nil
}

func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&obj); err != nil {
		return nil, jsonpos.Error(b, 0, err)
	}
	if obj == nil {
		return nil, errors.New("null")
	}
	if d.More() { // a second object, or garbage after the first
		line, col := jsonpos.Position(b, d.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: unexpected data after the object", line, col)
	}
	return obj, nil
}

func hasAny(obj map[string]json.RawMessage, keys []string) bool {
	for _, k := range keys {
		if raw, ok := obj[k]; ok && string(raw) != "null" {
			return true
		}
	}
	return false
}

func positiveInt(raw json.RawMessage) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		// 768.0 is an integer written as a float: accept it.
		f, ferr := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
		if ferr != nil || f != float64(int64(f)) {
			return 0, fmt.Errorf("want a positive integer, got %s", raw)
		}
		n = int64(f)
	}
	if n <= 0 || n > 1<<31 {
		return 0, fmt.Errorf("want a positive integer, got %s", raw)
	}
	return int(n), nil
}

// hfName is _name_or_path's last element, else the folder of a file named
// config.json, else the file's name without its extension; lowercased.
func hfName(top map[string]json.RawMessage, file string) string {
	var n string
	json.Unmarshal(top["_name_or_path"], &n)
	if n = strings.TrimRight(n, "/"); n != "" {
		return strings.ToLower(filepath.Base(n))
	}
	base := filepath.Base(file)
	if strings.EqualFold(base, "config.json") {
		if dir := filepath.Base(filepath.Dir(file)); dir != "." && dir != string(filepath.Separator) {
			return strings.ToLower(dir)
		}
	}
	return strings.ToLower(strings.TrimSuffix(base, filepath.Ext(base)))
}
