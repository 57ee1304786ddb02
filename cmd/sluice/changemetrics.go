package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// changeMetrics count the changes to the running config: reloads (SIGHUP,
// a file edit, POST /admin/reload) and the admin API's backend changes,
// by whether they took effect. A failed reload was only in the log.
type changeMetrics struct {
	total      *prometheus.CounterVec // source, result
	successful prometheus.Gauge
	lastOK     prometheus.Gauge
}

func newChangeMetrics() *changeMetrics {
	m := &changeMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_changes_total",
			Help: "Changes to the running config by source (reload: the file, by SIGHUP, its edit or POST /admin/reload; admin: a backend added or removed through the admin API) and result (ok, or failed: the running config kept).",
		}, []string{"source", "result"}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 if the last reload of the config file took effect, 0 if it failed and the running config was kept.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When the config last took effect (at start, or by a reload), in Unix seconds.",
		}),
	}
	m.successful.Set(1)
	m.lastOK.SetToCurrentTime()
	for _, src := range []string{"reload", "admin"} {
		for _, res := range []string{"ok", "failed"} {
			m.total.WithLabelValues(src, res)
		}
	}
	return m
}

func (m *changeMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.total, m.successful, m.lastOK} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// count records a change from source that took effect (ok) or not.
func (m *changeMetrics) count(source string, ok bool) {
	if m == nil {
		return
	}
	res := "failed"
	if ok {
		res = "ok"
	}
	m.total.WithLabelValues(source, res).Inc()
	if source != "reload" {
		return
	}
	if ok {
		m.successful.Set(1)
		m.lastOK.Set(float64(time.Now().UnixNano()) / 1e9)
	} else {
		m.successful.Set(0)
	}
}
