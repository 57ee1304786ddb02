package report

import "time"

// Goodput is the completed requests per second of elapsed whose TTFT is at
// most ttft and whose TPOT is at most tpot (a one-token answer is judged on
// TTFT alone): the rate of answers that met the SLO, as DistServe defines
// it. It matches the simulator's fleet.Result.Goodput.
func Goodput(samples []Sample, elapsed, ttft, tpot time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	good := 0
	for _, s := range samples {
		if !s.OK || s.TTFT > ttft {
			continue
		}
		if d, ok := s.TPOT(); ok && d > tpot {
			continue
		}
		good++
	}
	return float64(good) / elapsed.Seconds()
}
