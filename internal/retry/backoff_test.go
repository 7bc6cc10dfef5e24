package retry

import (
	"math"
	"testing"
	"testing/quick"
	"time"
)

func TestNominalDelayDefaults(t *testing.T) {
	t.Parallel()
	// The sequence of docs/retry-policy.md §2.1 with default settings,
	// before jitter.
	want := []time.Duration{500, 1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000}
	for i, w := range want {
		if got := NominalDelay(i+1, 500*time.Millisecond); got != w*time.Millisecond {
			t.Errorf("NominalDelay(%d, 500ms) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

func TestLocalDelayTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attempt int
		base    time.Duration
		u       float64
		want    time.Duration
	}{
		{1, 500 * time.Millisecond, 0, 375 * time.Millisecond},
		{1, 500 * time.Millisecond, 0.5, 437500 * time.Microsecond},
		{1, 500 * time.Millisecond, 1, 500 * time.Millisecond},
		{2, 500 * time.Millisecond, 0, 750 * time.Millisecond},
		{4, 500 * time.Millisecond, 1, 4 * time.Second},
		{5, 500 * time.Millisecond, 0, 6 * time.Second},
		{100, 500 * time.Millisecond, 0.999999, 7999998000},
		{1, 10 * time.Second, 0, 6 * time.Second},               // base above the cap
		{1, math.MaxInt64, 1, MaxLocalDelay},                    // huge base
		{math.MaxInt, 500 * time.Millisecond, 1, MaxLocalDelay}, // huge attempt
		{0, 500 * time.Millisecond, 1, 500 * time.Millisecond},  // attempt < 1 counts as 1
		{-7, 500 * time.Millisecond, 1, 500 * time.Millisecond}, // negative attempt
		{3, 0, 0.5, 0},            // zero base
		{3, -time.Second, 0.5, 0}, // negative base counts as 0
		{1, 500 * time.Millisecond, -1, 375 * time.Millisecond},         // u clamped to 0
		{1, 500 * time.Millisecond, math.NaN(), 375 * time.Millisecond}, // NaN counts as 0
		{1, 500 * time.Millisecond, 7, 500 * time.Millisecond},          // u clamped to 1
		{34, 1, 1, MaxLocalDelay},                                       // 1ns · 2^33 > 8s
		{33, 1, 1, 4294967296},                                          // 1ns · 2^32
	}
	for _, tc := range cases {
		if got := LocalDelay(tc.attempt, tc.base, tc.u); got != tc.want {
			t.Errorf("LocalDelay(%d, %v, %v) = %v, want %v", tc.attempt, tc.base, tc.u, got, tc.want)
		}
	}
}

// checkBounds reports whether LocalDelay(a, base, u) lies within
// [floor(0.75·nominal), nominal] with nominal = min(max(0,base)·2^(a−1), 8s).
func checkBounds(t *testing.T, a int, base time.Duration, u float64) bool {
	t.Helper()
	n := NominalDelay(a, base)
	if n < 0 || n > MaxLocalDelay {
		t.Errorf("NominalDelay(%d, %v) = %v out of [0, %v]", a, base, n, MaxLocalDelay)
		return false
	}
	if base > 0 && a >= 1 && a <= 62 {
		// nominal is exactly min(base·2^(a−1), cap), computed with big headroom
		exact := float64(base) * math.Pow(2, float64(a-1))
		want := time.Duration(math.Min(exact, float64(MaxLocalDelay)))
		if exact < float64(MaxLocalDelay) && n != want {
			t.Errorf("NominalDelay(%d, %v) = %v, want %v", a, base, n, want)
			return false
		}
		if exact >= float64(MaxLocalDelay) && n != MaxLocalDelay {
			t.Errorf("NominalDelay(%d, %v) = %v, want cap", a, base, n)
			return false
		}
	}
	d := LocalDelay(a, base, u)
	if d < 0 || d > n || 4*int64(d) < 3*int64(n)-3 {
		t.Errorf("LocalDelay(%d, %v, %v) = %v outside [0.75, 1] × %v", a, base, u, d, n)
		return false
	}
	return true
}

func TestLocalDelayBoundsGrid(t *testing.T) {
	t.Parallel()
	bases := []time.Duration{1, 7, time.Millisecond, 100 * time.Millisecond, 333 * time.Millisecond,
		500 * time.Millisecond, time.Second, 3 * time.Second, 8 * time.Second, 9 * time.Second,
		time.Hour, math.MaxInt64 / 3, math.MaxInt64}
	us := []float64{0, 1e-12, 0.1, 0.25, 0.5, 0.75, 0.999, math.Nextafter(1, 0)}
	for a := -2; a <= 80; a++ {
		for _, b := range bases {
			for _, u := range us {
				if !checkBounds(t, a, b, u) {
					return
				}
			}
		}
	}
	for _, a := range []int{100, 1000, 1 << 20, math.MaxInt32, math.MaxInt} {
		if !checkBounds(t, a, 500*time.Millisecond, 0.3) {
			return
		}
	}
}

func TestLocalDelayMonotoneNominal(t *testing.T) {
	t.Parallel()
	for _, b := range []time.Duration{1, time.Millisecond, 500 * time.Millisecond, 3 * time.Second, math.MaxInt64} {
		prev := time.Duration(0)
		for a := 1; a <= 100; a++ {
			n := NominalDelay(a, b)
			if n < prev {
				t.Fatalf("NominalDelay(%d, %v) = %v < NominalDelay(%d) = %v", a, b, n, a-1, prev)
			}
			// with the same draw the jittered delay is monotone too
			if a > 1 && LocalDelay(a, b, 0.4) < LocalDelay(a-1, b, 0.4) {
				t.Fatalf("LocalDelay not monotone at attempt %d base %v", a, b)
			}
			prev = n
		}
	}
}

func TestLocalDelayQuick(t *testing.T) {
	t.Parallel()
	f := func(a int32, base int64, u float64) bool {
		return checkBounds(t, int(a), time.Duration(base), u)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	g := func(a uint8, baseMs uint16, u uint32) bool {
		uf := float64(u) / (1 << 32) // in [0, 1)
		return checkBounds(t, int(a), time.Duration(baseMs)*time.Millisecond, uf)
	}
	if err := quick.Check(g, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
}
