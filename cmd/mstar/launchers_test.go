package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The launchers in scripts/ (a Slurm array job, a Kubernetes Indexed Job)
// pass their syntax checks, and their command lines, run here as the
// scheduler would run them, shard a CPU suite whose merge equals the whole
// run. This test binary stands in for mstar (runAsMstarEnv).

const scripts = "../../scripts"

// launcherPath is a folder holding "mstar" (this test binary as mstar) and
// the extra executables given, for PATH.
func launcherPath(t *testing.T, extra map[string]string) string {
	t.Helper()
	for _, tool := range []string{"bash", "sh", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the launchers need %s: %v", tool, err)
		}
	}
	bin := t.TempDir()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"mstar": fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", runAsMstarEnv, self)}
	for k, v := range extra {
		files[k] = v
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin + string(os.PathListSeparator) + os.Getenv("PATH")
}

func runScript(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestLaunchersParse(t *testing.T) {
	launcherPath(t, nil) // skips without bash
	shells, _ := filepath.Glob(filepath.Join(scripts, "*.sh"))
	if len(shells) == 0 {
		t.Fatal("no scripts/*.sh")
	}
	for _, s := range shells {
		if out, err := runScript(t, nil, "bash", "-n", s); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
	}
	for _, s := range []string{"slurm/mstar-shards.sbatch", "slurm/submit.sh", "k8s/render.sh"} {
		if out, err := runScript(t, nil, "bash", "-n", filepath.Join(scripts, s)); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
	}
	// The templates are YAML before rendering too.
	for _, s := range []string{"k8s/mstar-shards.yaml", "k8s/mstar-merge.yaml"} {
		raw, err := os.ReadFile(filepath.Join(scripts, s))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(raw, &v); err != nil || v["kind"] != "Job" {
			t.Errorf("%s: %v (kind %v)", s, err, v["kind"])
		}
	}
}

// The array's tasks, run as Slurm would (SLURM_ARRAY_TASK_ID 1..N), write
// shards that merge into the whole run; so does submit.sh through a
// stand-in sbatch that runs each job here at once.
func TestSlurmArrayJob(t *testing.T) {
	fakeSbatch := `#!/usr/bin/env bash
# sbatch, run here: the array's tasks one after the other, or --wrap's command.
echo "sbatch $*" >>"$SBATCH_LOG"
array="" wrap="" script=""
while [ $# -gt 0 ]; do
	case $1 in
	--array=*) array=${1#--array=} ;;
	--wrap) wrap=$2; shift ;;
	-*) ;;
	*) script=$1 ;;
	esac
	shift
done
if [ -n "$wrap" ]; then sh -c "$wrap" >>"$SBATCH_LOG" 2>&1; echo 1002; exit 0; fi
n=${array#1-}
for i in $(seq 1 "$n"); do
	SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=$n SLURM_ARRAY_TASK_COUNT=$n bash "$script" >>"$SBATCH_LOG" 2>&1 || true
done
echo 1001
`
	path := launcherPath(t, map[string]string{"sbatch": fakeSbatch})
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	if _, stderr, code := runMstar(t, sweepArgs(dir, "--out", whole)...); code != exitOK {
		t.Fatalf("whole run: exit %d: %s", code, stderr)
	}
	_, want := keysOf(t, whole)
	suite := strings.Join(sweepArgs(dir), " ")

	// The tasks by hand, N from the array's size.
	direct := filepath.Join(dir, "direct")
	var shards []string
	for i := 1; i <= 3; i++ {
		env := []string{"PATH=" + path, "MSTAR_ARGS=" + suite, "MSTAR_OUT_DIR=" + direct, "MSTAR_SHARDS=",
			"SLURM_ARRAY_TASK_ID=" + strconv.Itoa(i), "SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_MAX=3", "SLURM_ARRAY_TASK_COUNT=3"}
		if out, err := runScript(t, env, "bash", filepath.Join(scripts, "slurm/mstar-shards.sbatch")); err != nil {
			t.Fatalf("task %d: %v\n%s", i, err, out)
		}
		shards = append(shards, filepath.Join(direct, fmt.Sprintf("shard-%d-of-3.json", i)))
	}
	merged := filepath.Join(direct, "merged.json")
	if _, stderr, code := runMstar(t, append([]string{"report", "merge", "-o", merged}, shards...)...); code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	if _, got := keysOf(t, merged); !slices.Equal(got, want) {
		t.Errorf("the tasks' merge differs from the whole run:\n got %v\nwant %v", got, want)
	}
	// A re-run of one task (--array=2) must be told N.
	env := []string{"PATH=" + path, "MSTAR_ARGS=" + suite, "MSTAR_OUT_DIR=" + direct, "MSTAR_SHARDS=",
		"SLURM_ARRAY_TASK_ID=2", "SLURM_ARRAY_TASK_MIN=2", "SLURM_ARRAY_TASK_MAX=2", "SLURM_ARRAY_TASK_COUNT=1"}
	if out, err := runScript(t, env, "bash", filepath.Join(scripts, "slurm/mstar-shards.sbatch")); err == nil || !strings.Contains(out, "set MSTAR_SHARDS=N") {
		t.Errorf("a task of --array=2 without MSTAR_SHARDS: %v\n%s", err, out)
	}

	// submit.sh: the array, then the merge after it.
	sub := filepath.Join(dir, "submitted")
	log := filepath.Join(dir, "sbatch.log")
	out, err := runScript(t, []string{"PATH=" + path, "SBATCH_LOG=" + log}, "bash", append([]string{filepath.Join(scripts, "slurm/submit.sh"), "3", sub}, sweepArgs(dir)...)...)
	calls, _ := os.ReadFile(log)
	if err != nil || !strings.Contains(out, "merge: job 1002") {
		t.Fatalf("submit.sh: %v\n%s\nsbatch saw:\n%s", err, out, calls)
	}
	if !strings.Contains(string(calls), "--array=1-3") || !strings.Contains(string(calls), "--dependency=afterany:1001") {
		t.Errorf("submit.sh's sbatch calls lack the array or the merge's dependency:\n%s", calls)
	}
	if _, got := keysOf(t, filepath.Join(sub, "merged.json")); !slices.Equal(got, want) {
		t.Errorf("submit.sh's merge differs from the whole run:\n got %v\nwant %v\nsbatch log:\n%s", got, want, calls)
	}
	if out, err := runScript(t, []string{"PATH=" + path}, "bash", filepath.Join(scripts, "slurm/submit.sh"), "zero", sub, "arena", "sweep"); err == nil || !strings.Contains(out, "usage: submit.sh N") {
		t.Errorf("submit.sh zero: %v\n%s", err, out)
	}
}

// k8sJob is the part of a rendered Job the test checks and runs.
type k8sJob struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		CompletionMode string `yaml:"completionMode"`
		Completions    int    `yaml:"completions"`
		Parallelism    int    `yaml:"parallelism"`
		Template       struct {
			Spec struct {
				RestartPolicy string `yaml:"restartPolicy"`
				Containers    []struct {
					Image   string   `yaml:"image"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Env     []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					Resources struct {
						Limits map[string]any `yaml:"limits"`
					} `yaml:"resources"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name                  string `yaml:"name"`
					PersistentVolumeClaim *struct {
						ClaimName string `yaml:"claimName"`
					} `yaml:"persistentVolumeClaim"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func renderJob(t *testing.T, args ...string) k8sJob {
	t.Helper()
	out, err := runScript(t, nil, "bash", append([]string{filepath.Join(scripts, "k8s/render.sh")}, args...)...)
	if err != nil {
		t.Fatalf("render.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var j k8sJob
	if err := yaml.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("render.sh %s: not YAML: %v\n%s", strings.Join(args, " "), err, out)
	}
	if j.APIVersion != "batch/v1" || j.Kind != "Job" || len(j.Spec.Template.Spec.Containers) != 1 || j.Spec.Template.Spec.RestartPolicy != "Never" {
		t.Fatalf("render.sh %s: not a one-container batch/v1 Job:\n%s", strings.Join(args, " "), out)
	}
	return j
}

// runPod runs a rendered Job's container command here, with its env and
// the extra variables the Job controller sets.
func runPod(t *testing.T, j k8sJob, path string, extra ...string) string {
	t.Helper()
	c := j.Spec.Template.Spec.Containers[0]
	env := []string{"PATH=" + path}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	out, err := runScript(t, append(env, extra...), c.Command[0], append(c.Command[1:], c.Args...)...)
	if err != nil {
		t.Fatalf("pod %v: %v\n%s", extra, err, out)
	}
	return out
}

// The Indexed Job, rendered, parses as YAML, and its pods' command, run for
// JOB_COMPLETION_INDEX 0..N-1, writes shards that the merge Job joins into
// the whole run.
func TestKubernetesIndexedJob(t *testing.T) {
	path := launcherPath(t, nil)
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	if _, stderr, code := runMstar(t, sweepArgs(dir, "--out", whole)...); code != exitOK {
		t.Fatalf("whole run: exit %d: %s", code, stderr)
	}
	_, want := keysOf(t, whole)
	results := filepath.Join(dir, "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	common := []string{"-n", "3", "-i", "registry.example/mstar:test", "-c", "mstar-results", "-o", results}
	j := renderJob(t, append(append(common, "-g", "0", "-p", "2", "--"), sweepArgs(dir)...)...)
	c := j.Spec.Template.Spec.Containers[0]
	if j.Spec.CompletionMode != "Indexed" || j.Spec.Completions != 3 || j.Spec.Parallelism != 2 || c.Image != "registry.example/mstar:test" ||
		fmt.Sprint(c.Resources.Limits["nvidia.com/gpu"]) != "0" {
		t.Errorf("rendered Job: %+v", j.Spec)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "results" && m.MountPath == results)
	}
	claimed := slices.ContainsFunc(j.Spec.Template.Spec.Volumes, func(v struct {
		Name                  string `yaml:"name"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
	}) bool {
		return v.Name == "results" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "mstar-results"
	})
	if !mounted || !claimed {
		t.Errorf("the results volume is not the claim mounted at %s: %+v %+v", results, c.VolumeMounts, j.Spec.Template.Spec.Volumes)
	}
	for k := 0; k < j.Spec.Completions; k++ {
		out := runPod(t, j, path, "JOB_COMPLETION_INDEX="+strconv.Itoa(k), "HOSTNAME=pod-"+strconv.Itoa(k))
		if !strings.Contains(out, fmt.Sprintf("shard %d/3 on pod-%d", k+1, k)) {
			t.Errorf("pod %d said:\n%s", k, out)
		}
	}
	m := renderJob(t, append([]string{"--merge"}, common...)...)
	if m.Metadata.Name != "mstar-shards-merge" {
		t.Errorf("merge Job named %q", m.Metadata.Name)
	}
	if out := runPod(t, m, path); !strings.Contains(out, `cover its 5 cells once`) {
		t.Errorf("merge pod said:\n%s", out)
	}
	if _, got := keysOf(t, filepath.Join(results, "merged.json")); !slices.Equal(got, want) {
		t.Errorf("the Job's merge differs from the whole run:\n got %v\nwant %v", got, want)
	}
	if out, err := runScript(t, nil, "bash", filepath.Join(scripts, "k8s/render.sh"), "-n", "0", "-i", "x", "-c", "y", "--", "bench", "moe"); err == nil || !strings.Contains(out, "-n N: want a whole number from 1") {
		t.Errorf("render.sh -n 0: %v\n%s", err, out)
	}
}
