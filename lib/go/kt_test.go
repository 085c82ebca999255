package kt

// The Go package against libkt: layouts against tests/api/kt_layout.h, the shipped tiny model (metadata,
// tokenizer, greedy generation, streaming), expert pools against a Go MoE FFN in float64, the GGUF writer,
// goroutines sharing a model and a pool, errors as Go errors, and finalizers freeing what was not closed.

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func modelPath() string {
	if p := os.Getenv("KT_TEST_MODEL"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "examples", "kt-tiny-moe", "kt-tiny-moe.q8_0.gguf")
}

func loadModel(t *testing.T) *Model {
	t.Helper()
	m, err := LoadModel(modelPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func TestLayoutsMatchC(t *testing.T) {
	path := os.Getenv("KT_LAYOUT_H")
	if path == "" {
		path = filepath.Join("..", "..", "tests", "api", "kt_layout.h")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]structLayout{}
	var order []string
	line := regexp.MustCompile(`(?m)^KT_LAYOUT_(STRUCT|FIELD)\(([^)]*)\)`)
	for _, m := range line.FindAllStringSubmatch(string(text), -1) {
		args := strings.Split(m[2], ",")
		for i := range args {
			args[i] = strings.TrimSpace(args[i])
		}
		num := func(s string) uintptr { n, _ := strconv.Atoi(s); return uintptr(n) }
		if m[1] == "STRUCT" {
			want[args[0]] = structLayout{name: args[0], size: num(args[1])}
			order = append(order, args[0])
		} else {
			s := want[args[0]]
			s.fields = append(s.fields, fieldLayout{args[1], num(args[2]), num(args[3])})
			want[args[0]] = s
		}
	}
	// Every struct the package uses must be C's or an older version of it (its fields a prefix of C's): kt accepts
	// an older struct's size. Structs kt.h has and the package does not use are listed, not failures.
	have := cLayouts()
	bound := map[string]bool{}
	for _, h := range have {
		bound[h.name] = true
		w, ok := want[h.name]
		if !ok {
			t.Errorf("%s is not in %s", h.name, path)
			continue
		}
		if len(h.fields) > len(w.fields) {
			t.Errorf("%s: %d fields, C has %d", h.name, len(h.fields), len(w.fields))
			continue
		}
		for i := range h.fields {
			if h.fields[i] != w.fields[i] {
				t.Errorf("%s: field %+v, C has %+v", h.name, h.fields[i], w.fields[i])
			}
		}
		if len(h.fields) == len(w.fields) && h.size != w.size {
			t.Errorf("%s: size %d, C has %d", h.name, h.size, w.size)
		}
	}
	for _, name := range order {
		if !bound[name] {
			t.Logf("%s is in kt.h but not used by the package", name)
		}
	}
}

func TestModelMetadataAndErrors(t *testing.T) {
	m := loadModel(t)
	if m.Architecture() != "qwen3moe" {
		t.Fatalf("architecture %q", m.Architecture())
	}
	n, err := m.MetaInt("qwen3moe.expert_count")
	if err != nil || n < 2 {
		t.Fatal(n, err)
	}
	i, err := m.TensorFind("blk.0.ffn_up_exps.weight")
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.TensorInfo(i)
	if err != nil || len(info.Ne) != 3 || info.Ne[2] != n {
		t.Fatal(info, err)
	}
	values, err := m.TensorF32(i)
	if err != nil || uint64(len(values)) != info.NElements {
		t.Fatal(len(values), err)
	}

	_, err = m.MetaInt("no.such.key")
	var ktErr *Error
	if !errors.As(err, &ktErr) || ktErr.Status != StatusNotFound || !strings.Contains(ktErr.Message, "no.such.key") {
		t.Fatalf("%v", err)
	}
	if !errors.Is(err, &Error{Status: StatusNotFound}) {
		t.Fatal("errors.Is by status")
	}
	_, err = LoadModel(filepath.Join(t.TempDir(), "absent.gguf"))
	if !errors.As(err, &ktErr) || ktErr.Status != StatusIOError || !strings.Contains(err.Error(), "absent.gguf") {
		t.Fatalf("%v", err)
	}
	cancelled := 0
	_, err = LoadModelWith(modelPath(), ModelParams{Progress: func(float32) bool { cancelled++; return false }})
	if !errors.As(err, &ktErr) || ktErr.Status != StatusCancelled || cancelled != 1 {
		t.Fatalf("%v after %d progress calls", err, cancelled)
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	m := loadModel(t)
	tok := m.Tokenizer()
	info, err := tok.VocabInfo()
	if err != nil || info.Kind != VocabBPE || info.NTokens < 256 {
		t.Fatal(info, err)
	}
	text := "In the beginning God created the heaven and the earth."
	ids, err := tok.Tokenize(text, false, false)
	if err != nil || len(ids) == 0 || len(ids) >= len(text) {
		t.Fatal(ids, err)
	}
	back, err := tok.Detokenize(ids, false, false)
	if err != nil || back != text {
		t.Fatalf("%q %v", back, err)
	}
	var pieces []byte
	for _, id := range ids {
		p, err := tok.TokenToPiece(id, false)
		if err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, p...)
	}
	if string(pieces) != text {
		t.Fatalf("pieces %q", pieces)
	}
	empty, err := tok.Tokenize("", false, false)
	if err != nil || len(empty) != 0 {
		t.Fatal(empty, err)
	}
}

func generate(t *testing.T, m *Model, n int) []int32 {
	prompt, err := m.Tokenizer().Tokenize("And God said", true, true)
	if err != nil {
		t.Error(err)
		return nil
	}
	c, err := NewContext(m, ContextParams{NThreads: 2, NCtx: 128})
	if err != nil {
		t.Error(err)
		return nil
	}
	defer c.Close()
	var streamed []int32
	g, err := c.Generate(prompt, n, nil, nil, func(tok int32) bool { streamed = append(streamed, tok); return true })
	if err != nil || len(g.Tokens) != n || g.Stop != StopMaxTokens {
		t.Error(g, err)
		return nil
	}
	for i := range streamed {
		if streamed[i] != g.Tokens[i] {
			t.Error("streamed tokens differ")
		}
	}
	if c.NPast() != int64(len(prompt)+n) {
		t.Error("n_past", c.NPast())
	}
	return g.Tokens
}

func TestGreedyGenerationMatchesArgmaxAndStreams(t *testing.T) {
	m := loadModel(t)
	a := generate(t, m, 12)
	b := generate(t, m, 12)
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("greedy generation is not reproducible", a, b)
		}
	}
	prompt, _ := m.Tokenizer().Tokenize("And God said", true, true)
	c, err := NewContext(m, ContextParams{NThreads: 2, NCtx: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err == nil {
		t.Fatal("a model with an open context closed")
	}
	if err := c.Decode(prompt, LogitsLast); err != nil {
		t.Fatal(err)
	}
	logits, err := c.Logits(-1)
	if err != nil || len(logits) != c.NVocab() {
		t.Fatal(len(logits), err)
	}
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if int32(best) != a[0] {
		t.Fatalf("argmax %d, generated %d", best, a[0])
	}
	if err := c.Decode([]int32{1 << 30}, LogitsLast); err == nil || c.NPast() != int64(len(prompt)) {
		t.Fatal("a bad token was decoded", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "from onToken" {
				t.Fatalf("the callback's panic came back as %v", r)
			}
		}()
		c.Generate(nil, 20, nil, nil, func(int32) bool { panic("from onToken") })
	}()
	stopAt := 0
	g, err := c.Generate(nil, 20, nil, nil, func(int32) bool { stopAt++; return stopAt < 3 })
	if err != nil || len(g.Tokens) != 3 || g.Stop != StopCallback {
		t.Fatal(g, err)
	}
	s := DefaultSampler()
	s.Seed = 7
	c.Reset()
	x, _ := c.Generate(prompt, 8, &s, nil, nil)
	c.Reset()
	y, _ := c.Generate(prompt, 8, &s, nil, nil)
	for i := range x.Tokens {
		if x.Tokens[i] != y.Tokens[i] {
			t.Fatal("seeded sampling is not reproducible")
		}
	}
	c.Close()

	d, err := NewDetokenizer(m, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var text []byte
	for _, tok := range a {
		piece, err := d.Push(tok)
		if err != nil || !utf8.Valid(piece) {
			t.Fatal(piece, err)
		}
		text = append(text, piece...)
	}
	rest, _ := d.Flush()
	whole, _ := m.Tokenizer().Detokenize(a, false, false)
	if string(append(text, rest...)) != whole {
		t.Fatalf("%q != %q", text, whole)
	}
}

func TestGoroutinesShareAModel(t *testing.T) {
	m := loadModel(t)
	want := generate(t, m, 8)
	var wg sync.WaitGroup
	results := make([][]int32, 3)
	for g := range results {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			results[g] = generate(t, m, 8)
			// Failures on the shared model from several goroutines: each sees its own message.
			for i := 0; i < 50; i++ {
				key := "missing." + strconv.Itoa(g) + "." + strconv.Itoa(i)
				if _, err := m.MetaInt(key); err == nil || !strings.Contains(err.Error(), key) {
					t.Errorf("goroutine %d: %v", g, err)
				}
			}
		}(g)
	}
	wg.Wait()
	for _, r := range results {
		for i := range want {
			if r[i] != want[i] {
				t.Fatal("goroutines disagree", r, want)
			}
		}
	}
}

// ---- expert pools ----

const (
	poolE = 6
	poolH = 64
	poolI = 96
	poolK = 2
)

type rng uint64

func (r *rng) next() float32 {
	*r ^= *r >> 12
	*r ^= *r << 25
	*r ^= *r >> 27
	u := float32((uint64(*r)*0x2545f4914f6cdd1d)>>40) / float32(1<<24)
	return 2*u - 1
}

func (r *rng) vec(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.next() * scale
	}
	return v
}

type layer struct{ gate, up, down []float32 }

func newLayer(seed uint64) layer {
	r := rng(seed)
	return layer{r.vec(poolE*poolI*poolH, 0.2), r.vec(poolE*poolI*poolH, 0.2), r.vec(poolE*poolH*poolI, 0.2)}
}

// reference: out[t] = sum_k w[t][k] * down_e(silu(gate_e x[t]) * up_e x[t]) in float64, skipping -1 and masked.
func reference(l layer, x []float32, ids []int32, w []float32, masked []bool, H, I int) []float64 {
	n := len(x) / H
	out := make([]float64, n*H)
	for t := 0; t < n; t++ {
		for k := 0; k < poolK; k++ {
			e := int(ids[t*poolK+k])
			if e < 0 || masked[e] {
				continue
			}
			h := make([]float64, I)
			for i := range h {
				var g, u float64
				for j := 0; j < H; j++ {
					g += float64(l.gate[(e*I+i)*H+j]) * float64(x[t*H+j])
					u += float64(l.up[(e*I+i)*H+j]) * float64(x[t*H+j])
				}
				h[i] = g / (1 + math.Exp(-g)) * u
			}
			for j := 0; j < H; j++ {
				var d float64
				for i := 0; i < I; i++ {
					d += float64(l.down[(e*H+j)*I+i]) * h[i]
				}
				out[t*H+j] += float64(w[t*poolK+k]) * d
			}
		}
	}
	return out
}

func relError(a []float32, b []float64) float64 {
	var worst, scale float64
	for i := range b {
		worst = math.Max(worst, math.Abs(float64(a[i])-b[i]))
		scale = math.Max(scale, math.Abs(b[i]))
	}
	return worst / scale
}

func routing(n int, seed uint64) ([]int32, []float32) {
	r := rng(seed)
	ids := make([]int32, 0, n*poolK)
	w := make([]float32, 0, n*poolK)
	for t := 0; t < n; t++ {
		a := int32((r.next()+1)*0.5*poolE) % poolE
		b := (a + 1 + int32(t%(poolE-1))) % poolE
		if t%5 == 4 {
			b = -1
		}
		p := 0.25 + 0.5*(r.next()+1)*0.5
		ids = append(ids, a, b)
		w = append(w, p, 1-p)
	}
	return ids, w
}

func newPool(t *testing.T, format int, l layer) *ExpertPool {
	p, err := NewExpertPool(ExpertPoolParams{NExperts: poolE, HiddenSize: poolH, IntermediateSize: poolI,
		WeightFormat: format, Int4GroupSize: 32, NThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.LoadF32(l.gate, l.up, l.down); err != nil {
		t.Fatal(err)
	}
	return p
}

var noMask = make([]bool, poolE)

func TestExpertPoolFormatsMatchTheReference(t *testing.T) {
	l := newLayer(1)
	// bf16 rounds weights and activations to 8 mantissa bits; int8 quantizes both; int4 keeps 4 bits per weight.
	for _, c := range []struct {
		format    int
		tolerance float64
	}{{WeightsBF16, 0.02}, {WeightsInt8, 0.03}, {WeightsInt4, 0.15}, {WeightsAsSource, 0.02}} {
		p := newPool(t, c.format, l)
		for _, n := range []int{1, 7, 33} {
			r := rng(uint64(n) + 10)
			x := r.vec(n*poolH, 1)
			ids, w := routing(n, uint64(n))
			y := make([]float32, n*poolH)
			if err := p.Forward(x, ids, w, poolK, y, false); err != nil {
				t.Fatal(err)
			}
			if e := relError(y, reference(l, x, ids, w, noMask, poolH, poolI)); e > c.tolerance {
				t.Errorf("format %d, %d tokens: relative error %g", c.format, n, e)
			}
		}
	}
}

func TestExpertPoolJobsMasksAndErrors(t *testing.T) {
	l := newLayer(2)
	p := newPool(t, WeightsBF16, l)
	n := 9
	r := rng(3)
	x := r.vec(n*poolH, 1)
	ids, w := routing(n, 4)
	want := reference(l, x, ids, w, noMask, poolH, poolI)

	jobs := []*Job{p.NewJob(n, poolK), p.NewJob(n, poolK)}
	var pending []*Pending
	for i, j := range jobs {
		copy(j.Input, x)
		copy(j.IDs, ids)
		copy(j.Weights, w)
		if i == 1 {
			for k := range j.Output {
				j.Output[k] = 1
			}
			j.Accumulate = true
		}
		pj, err := p.Submit(j)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, pj)
	}
	for _, pj := range pending {
		if err := pj.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	shifted := make([]float64, len(want))
	for i, v := range want {
		shifted[i] = v + 1
	}
	if e := relError(jobs[0].Output, want); e > 0.02 {
		t.Error("job 0", e)
	}
	if e := relError(jobs[1].Output, shifted); e > 0.02 {
		t.Error("job 1 (accumulate)", e)
	}
	for _, j := range jobs {
		j.Free()
	}

	mask := make([]bool, poolE)
	mask[1], mask[4] = true, true
	if err := p.SetMask(mask); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, n*poolH)
	if err := p.Forward(x, ids, w, poolK, y, false); err != nil {
		t.Fatal(err)
	}
	if e := relError(y, reference(l, x, ids, w, mask, poolH, poolI)); e > 0.02 {
		t.Error("masked", e)
	}
	p.SetMask(nil)

	bad := append([]int32(nil), ids...)
	bad[3] = poolE
	err := p.Forward(x, bad, w, poolK, y, false)
	var ktErr *Error
	if !errors.As(err, &ktErr) || ktErr.Status != StatusInvalidArgument || !strings.Contains(ktErr.Message, "out of range") {
		t.Fatalf("%v", err)
	}
	if err := p.Forward(x, ids[:3], w, poolK, y, false); err == nil {
		t.Fatal("mismatched lengths accepted")
	}
	if err := p.LoadF32(l.gate[1:], l.up, l.down); err == nil {
		t.Fatal("short weights accepted")
	}
}

func TestGoroutinesShareAPool(t *testing.T) {
	l := newLayer(6)
	p := newPool(t, WeightsBF16, l)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				n := 1 + (g+round)%6
				r := rng(uint64(100 + g*10 + round))
				x := r.vec(n*poolH, 1)
				ids, w := routing(n, uint64(g+round))
				y := make([]float32, n*poolH)
				if err := p.Forward(x, ids, w, poolK, y, false); err != nil {
					t.Error(err)
					return
				}
				if e := relError(y, reference(l, x, ids, w, noMask, poolH, poolI)); e > 0.02 {
					t.Errorf("goroutine %d: relative error %g", g, e)
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestExpertPoolFromTheModel(t *testing.T) {
	m := loadModel(t)
	nE, _ := m.MetaInt("qwen3moe.expert_count")
	H, _ := m.MetaInt("qwen3moe.embedding_length")
	I, _ := m.MetaInt("qwen3moe.expert_feed_forward_length")
	read := func(name string) []float32 {
		i, err := m.TensorFind(name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := m.TensorF32(i)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	l := layer{read("blk.0.ffn_gate_exps.weight"), read("blk.0.ffn_up_exps.weight"), read("blk.0.ffn_down_exps.weight")}
	p, err := NewExpertPool(ExpertPoolParams{NExperts: int(nE), HiddenSize: int(H), IntermediateSize: int(I), NThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.LoadModel(m, 0); err != nil {
		t.Fatal(err)
	}
	info, err := p.Info()
	if err != nil || !info.Loaded || !strings.Contains(info.WeightFormats, "Q8_0") {
		t.Fatal(info, err)
	}
	n := 5
	r := rng(9)
	x := r.vec(n*int(H), 1)
	ids := make([]int32, n*poolK)
	w := make([]float32, n*poolK)
	for i := range ids {
		ids[i] = int32(i * 3 % int(nE))
		w[i] = 0.4 + 0.2*float32(1-i%2)
	}
	y := make([]float32, n*int(H))
	if err := p.Forward(x, ids, w, poolK, y, false); err != nil {
		t.Fatal(err)
	}
	if e := relError(y, reference(l, x, ids, w, make([]bool, nE), int(H), int(I))); e > 0.03 {
		t.Fatalf("relative error %g", e)
	}
}

// ---- writer, quantization, logging, finalizers ----

func TestWriterReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.gguf")
	a := make([]float32, 3*64)
	for i := range a {
		a[i] = float32(i)/16 - 6
	}
	w, err := NewGgufWriter(0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, err := range []error{w.SetString("general.architecture", "test"), w.SetUint32("test.u32", 7),
		w.SetFloat32("test.f32", 0.5), w.SetBool("test.flag", true), w.SetArrayString("test.names", []string{"a", "Ġb", ""}),
		w.SetArrayInt32("test.ids", []int32{-1, 2, 3}), w.AddTensorF32("a", TypeF32, []int64{64, 3}, a),
		w.AddTensorF32("q", TypeQ8_0, []int64{64, 3}, a), w.Write(path)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SetUint32("test.u32", 8); err == nil || !strings.Contains(err.Error(), "test.u32") {
		t.Fatal(err)
	}
	m, err := LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v, _ := m.MetaInt("test.u32"); v != 7 {
		t.Fatal(v)
	}
	if v, _ := m.MetaString("general.architecture"); v != "test" {
		t.Fatal(v)
	}
	i, _ := m.TensorFind("a")
	back, _ := m.TensorF32(i)
	for k := range a {
		if back[k] != a[k] {
			t.Fatal("tensor a differs")
		}
	}
	i, _ = m.TensorFind("q")
	q, _ := m.TensorF32(i)
	data, _ := Quantize(TypeQ8_0, a, 64)
	deq, err := Dequantize(TypeQ8_0, data, 3, 64)
	if err != nil {
		t.Fatal(err)
	}
	for k := range q {
		if q[k] != deq[k] || math.Abs(float64(q[k]-a[k])) > 0.05 {
			t.Fatal("Q8_0 tensor", k, q[k], deq[k], a[k])
		}
	}
	if _, err := NewGgufWriter(24); err == nil {
		t.Fatal("alignment 24 accepted")
	}

	spec, _ := NewGgufWriter(0)
	defer spec.Close()
	spec.SetString("general.architecture", "qwen3moe")
	for _, kv := range []struct {
		k string
		v uint32
	}{{"embedding_length", 16}, {"block_count", 2}, {"feed_forward_length", 16}, {"attention.head_count", 2},
		{"attention.head_count_kv", 2}, {"expert_count", 4}, {"expert_used_count", 2}, {"vocab_size", 32},
		{"context_length", 64}} {
		spec.SetUint32("qwen3moe."+kv.k, kv.v)
	}
	spec.SetFloat32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6)
	specs, err := spec.ExpectedTensors()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range specs {
		found = found || (s.Name == "blk.1.ffn_down_exps.weight" && len(s.Ne) == 3 && s.Ne[2] == 4)
	}
	if !found {
		t.Fatal("no expert tensor listed", specs)
	}
}

func TestLogCallbackFromKtThreads(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	SetLogCallback(LogError, func(level int, message string) {
		mu.Lock()
		lines = append(lines, message)
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Quantize(TypeQ8_0, make([]float32, 33), 33); err == nil {
				t.Error("33 values quantized as Q8_0")
			}
		}()
	}
	wg.Wait()
	SetLogCallback(LogError, nil)
	Quantize(TypeQ8_0, make([]float32, 33), 33)
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "block size") {
			n++
		}
	}
	if n != 3 || len(lines) != 3 {
		t.Fatal(lines)
	}
}

func TestFinalizersFreeWhatWasNotClosed(t *testing.T) {
	before := finalizedOrClosed.Load()
	func() {
		for i := 0; i < 3; i++ {
			if _, err := NewGgufWriter(0); err != nil {
				t.Fatal(err)
			}
			if _, err := NewExpertPool(ExpertPoolParams{NExperts: 2, HiddenSize: 32, IntermediateSize: 32, NThreads: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for finalizedOrClosed.Load()-before < 6 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := finalizedOrClosed.Load() - before; got < 6 {
		t.Fatalf("%d of 6 dropped handles freed by finalizers", got)
	}
}

func TestLibraryInformation(t *testing.T) {
	if VersionNumber()/1000000 != 0 || Version() == "" || !strings.HasPrefix(BuildInfo(), "kt ") {
		t.Fatal(Version(), BuildInfo())
	}
	if TypeName(TypeQ4_K) != "Q4_K" || TypeName(4) != "" || StatusString(StatusNotFound) != "not found" {
		t.Fatal("names")
	}
}
