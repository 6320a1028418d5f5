package observe

import "github.com/prometheus/client_golang/prometheus"

// CacheState is one cache store's state for the metrics: its counts, and
// what the caches of the routes that use it did.
type CacheState struct {
	Store string
	// Objects, Bytes and Capacity are the store's now; Evictions and
	// Purged count the responses it dropped, to make room (or past their
	// time) and by purges and invalidations.
	Objects, Bytes, Capacity int64
	Evictions, Purged        uint64
	// Results are what the routes' caches did with requests and
	// responses, by result (hit, miss, stale, revalidated, collapsed,
	// stored, uncacheable, bypass, background, invalidated).
	Results []CacheResult
}

// CacheResult is one result of the caches of a store and its count.
type CacheResult struct {
	Result string
	Count  uint64
}

// WatchCache reports each cache store's state at scrape time: list calls
// report once per store.
func (m *Metrics) WatchCache(list func(report func(CacheState))) {
	m.reg.MustRegister(cacheCollector{list})
}

type cacheCollector struct {
	list func(report func(CacheState))
}

var (
	cacheTotalDesc = prometheus.NewDesc("sluice_cache_total",
		"What the routes' caches did, by store and result: hit (a fresh stored response answered), miss (went upstream, nothing usable stored), stale (a stale response answered: stale-if-error, stale-while-revalidate), revalidated (a 304 freshened a stored response), collapsed (answered from another request's fetch), stored, uncacheable (a response that could not be stored), bypass (a request the cache does not handle), background (background revalidations), invalidated (responses removed by unsafe methods).",
		[]string{"store", "result"}, nil)
	cacheObjectsDesc = prometheus.NewDesc("sluice_cache_objects",
		"The responses a cache store holds (Vary markers included).", []string{"store"}, nil)
	cacheBytesDesc = prometheus.NewDesc("sluice_cache_bytes",
		"The bytes a cache store holds, as it accounts them (bodies, heads, index).", []string{"store"}, nil)
	cacheCapacityDesc = prometheus.NewDesc("sluice_cache_capacity_bytes",
		"The most bytes a cache store holds.", []string{"store"}, nil)
	cacheEvictionsDesc = prometheus.NewDesc("sluice_cache_evictions_total",
		"Responses a cache store removed to make room, or past their time.", []string{"store"}, nil)
	cachePurgedDesc = prometheus.NewDesc("sluice_cache_purged_total",
		"Responses a cache store removed by purges and invalidations.", []string{"store"}, nil)
)

func (c cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cacheTotalDesc, cacheObjectsDesc, cacheBytesDesc, cacheCapacityDesc, cacheEvictionsDesc, cachePurgedDesc} {
		ch <- d
	}
}

func (c cacheCollector) Collect(ch chan<- prometheus.Metric) {
	c.list(func(s CacheState) {
		for _, r := range s.Results {
			ch <- prometheus.MustNewConstMetric(cacheTotalDesc, prometheus.CounterValue, float64(r.Count), s.Store, r.Result)
		}
		ch <- prometheus.MustNewConstMetric(cacheObjectsDesc, prometheus.GaugeValue, float64(s.Objects), s.Store)
		ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(s.Bytes), s.Store)
		ch <- prometheus.MustNewConstMetric(cacheCapacityDesc, prometheus.GaugeValue, float64(s.Capacity), s.Store)
		ch <- prometheus.MustNewConstMetric(cacheEvictionsDesc, prometheus.CounterValue, float64(s.Evictions), s.Store)
		ch <- prometheus.MustNewConstMetric(cachePurgedDesc, prometheus.CounterValue, float64(s.Purged), s.Store)
	})
}
