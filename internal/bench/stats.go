package bench

import (
	"math"
	"slices"
	"sort"
)

// Dist is a distribution of samples (milliseconds unless named otherwise).
type Dist struct {
	v      []float64
	sorted bool
}

// Add adds a sample.
func (d *Dist) Add(x float64) {
	d.v = append(d.v, x)
	d.sorted = false
}

// AddAll adds every sample of o.
func (d *Dist) AddAll(o *Dist) {
	d.v = append(d.v, o.v...)
	d.sorted = false
}

// N is the number of samples.
func (d *Dist) N() int { return len(d.v) }

func (d *Dist) sort() {
	if !d.sorted {
		sort.Float64s(d.v)
		d.sorted = true
	}
}

// Q is the q-quantile (0..1), nearest rank; NaN when empty.
func (d *Dist) Q(q float64) float64 {
	if len(d.v) == 0 {
		return math.NaN()
	}
	d.sort()
	i := int(math.Ceil(q*float64(len(d.v)))) - 1
	return d.v[min(max(i, 0), len(d.v)-1)]
}

// Max is the largest sample.
func (d *Dist) Max() float64 { return d.Q(1) }

// Mean is the average.
func (d *Dist) Mean() float64 {
	if len(d.v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range d.v {
		s += x
	}
	return s / float64(len(d.v))
}

// Summary is a distribution's percentiles.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summary summarises the distribution.
func (d *Dist) Summary() Summary {
	return Summary{N: d.N(), P50: d.Q(.5), P90: d.Q(.9), P99: d.Q(.99), Max: d.Max(), Mean: d.Mean()}
}

// Metrics are one scenario run's results, by name.
type Metrics map[string]float64

// PutSummary stores a summary as name.p50, name.p90, name.p99, name.max
// and name.n.
func (m Metrics) PutSummary(name string, s Summary) {
	m[name+".n"] = float64(s.N)
	m[name+".p50"] = s.P50
	m[name+".p90"] = s.P90
	m[name+".p99"] = s.P99
	m[name+".max"] = s.Max
}

// Agg is a metric over the rounds: the median and the spread.
type Agg struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Rounds []float64 `json:"rounds"`
}

// Aggregate combines rounds: each metric's median, min and max over the
// rounds that have it (NaN samples skipped).
func Aggregate(rounds []Metrics) map[string]Agg {
	names := map[string]bool{}
	for _, r := range rounds {
		for k := range r {
			names[k] = true
		}
	}
	out := map[string]Agg{}
	for k := range names {
		var a Agg
		var vals []float64
		for _, r := range rounds {
			v, ok := r[k]
			if !ok {
				v = math.NaN()
			}
			a.Rounds = append(a.Rounds, v)
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			a.Median, a.Min, a.Max = math.NaN(), math.NaN(), math.NaN()
		} else {
			slices.Sort(vals)
			a.Min, a.Max = vals[0], vals[len(vals)-1]
			if n := len(vals); n%2 == 1 {
				a.Median = vals[n/2]
			} else {
				a.Median = (vals[n/2-1] + vals[n/2]) / 2
			}
		}
		out[k] = a
	}
	return out
}
