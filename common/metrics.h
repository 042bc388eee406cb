// A small Prometheus metrics registry: counters, gauges and histograms, with or without
// labels, rendered in the Prometheus text exposition format (version 0.0.4) with # HELP and
// # TYPE lines. One Registry per server, shared by every front (gRPC, HTTP) that reports
// into the same /metrics page. The exposition rules it follows are in docs/observability.md.
//
// Usage:
//   metrics::Registry registry;
//   metrics::Counter& ok = registry.GetCounter("kvfold_x_total", "What it counts.",
//                                              {{"code", "OK"}});
//   ok.Increment();                      // lock-free; safe from any thread
//   std::string page = registry.Render();
//
// Get* returns the same series for the same name and label values, so a caller may look a
// series up once and keep the reference (references stay valid for the registry's life):
// the hot path then costs one atomic add and never allocates. A name registered as one
// type, or with other help text or buckets, is a programming error (the process aborts with the
// reason).
#ifndef KVFOLD_COMMON_METRICS_H_
#define KVFOLD_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvfold::metrics {

// Label name -> value. Names must match [a-zA-Z_][a-zA-Z0-9_]*; values are escaped.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  // Negative increments are ignored (counters only go up).
  void Increment(double by = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds`: strictly increasing, finite; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Observes `value` `count` times (e.g. a per-token mean over a turn's tokens).
  void ObserveMany(double value, uint64_t count);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative count per bound plus the +Inf bucket (== count()).
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // (bounds_.size() + 1), not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Bucket layouts.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& upper_bounds, const Labels& labels = {});
  // A gauge read when the page is rendered (pool utilisation, queue depth: values another
  // component owns). `read` runs under the registry's lock and must not call back into it.
  void AddCallbackGauge(const std::string& name, const std::string& help,
                        std::function<double()> read, const Labels& labels = {});
  // The same for a counter another component keeps (it must never decrease).
  void AddCallbackCounter(const std::string& name, const std::string& help,
                          std::function<double()> read, const Labels& labels = {});

  // The whole page: families in name order, each with # HELP and # TYPE, series in label
  // order. Histograms as _bucket{le=...} (cumulative, ending with +Inf), _sum and _count.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> read;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // key: rendered label set, "" when none
  };
  Series& GetSeries(const std::string& name, const std::string& help, Type type,
                    const std::vector<double>& bounds, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Formats a label set as Prometheus does: {a="x",b="y\"z"}; "" for none.
std::string FormatLabels(const Labels& labels);
// Prometheus text numbers: integers without a fraction, +Inf/-Inf/NaN spelled out.
std::string FormatValue(double value);

}  // namespace kvfold::metrics

#endif  // KVFOLD_COMMON_METRICS_H_
