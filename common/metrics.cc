#include "common/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvfold::metrics {
namespace {

// A programming error in how a metric is registered (never request input): abort with why.
void Require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "metrics: %s\n", what.c_str());
  std::abort();
}

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label values escape backslash, double quote and newline; help text only backslash and
// newline (the exposition format's two rules).
std::string Escape(const std::string& text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

const char* TypeName(int type) {
  static const char* kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

// `labels` rendered with one more label appended (histogram buckets' le).
std::string WithLabel(const std::string& rendered, const std::string& name,
                      const std::string& value) {
  const std::string pair = absl::StrCat(name, "=\"", value, "\"");
  if (rendered.empty()) return absl::StrCat("{", pair, "}");
  return absl::StrCat(rendered.substr(0, rendered.size() - 1), ",", pair, "}");
}

}  // namespace

std::string FormatLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    Require(ValidName(labels[i].first),
            absl::StrCat("bad metric label name '", labels[i].first, "'"));
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second, /*quotes=*/true),
                    "\"");
  }
  return out + "}";
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[32];
  // Shortest text that reads back as the same double.
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

void Counter::Increment(double by) {
  if (by > 0) value_.fetch_add(by, std::memory_order_relaxed);
}

void Gauge::Add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    Require(std::isfinite(bounds_[i]), "histogram bounds must be finite");
    Require(i == 0 || bounds_[i] > bounds_[i - 1], "histogram bounds must increase");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double value) { ObserveMany(value, 1); }

void Histogram::ObserveMany(double value, uint64_t count) {
  if (count == 0 || std::isnan(value)) return;
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  buckets_[i].fetch_add(count, std::memory_order_relaxed);
  sum_.fetch_add(value * static_cast<double>(count), std::memory_order_relaxed);
  count_.fetch_add(count, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  Require(start > 0 && factor > 1 && count > 0, "bad exponential bucket layout");
  std::vector<double> out;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) out.push_back(bound);
  return out;
}

Registry::Series& Registry::GetSeries(const std::string& name, const std::string& help, Type type,
                                      const std::vector<double>& bounds, const Labels& labels) {
  Require(ValidName(name), absl::StrCat("bad metric name '", name, "'"));
  auto [it, created] = families_.try_emplace(name);
  Family& family = it->second;
  if (created) {
    family.type = type;
    family.help = help;
    family.bounds = bounds;
  }
  Require(family.type == type, absl::StrCat("metric ", name, " registered with another type"));
  Require(family.help == help, absl::StrCat("metric ", name, " registered with other help text"));
  Require(family.bounds == bounds, absl::StrCat("metric ", name, " registered with other buckets"));
  return family.series[FormatLabels(labels)];
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(name, help, Type::kCounter, {}, labels);
  Require(!s.read, absl::StrCat("counter ", name, " is a callback counter"));
  if (s.counter == nullptr) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(name, help, Type::kGauge, {}, labels);
  Require(!s.read, absl::StrCat("gauge ", name, " is a callback gauge"));
  if (s.gauge == nullptr) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& upper_bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(name, help, Type::kHistogram, upper_bounds, labels);
  if (s.histogram == nullptr) s.histogram = std::make_unique<Histogram>(upper_bounds);
  return *s.histogram;
}

void Registry::AddCallbackGauge(const std::string& name, const std::string& help,
                                std::function<double()> read, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(name, help, Type::kGauge, {}, labels);
  Require(s.gauge == nullptr, absl::StrCat("gauge ", name, " already holds a set value"));
  s.read = std::move(read);
}

void Registry::AddCallbackCounter(const std::string& name, const std::string& help,
                                  std::function<double()> read, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(name, help, Type::kCounter, {}, labels);
  Require(s.counter == nullptr, absl::StrCat("counter ", name, " already counts by itself"));
  s.read = std::move(read);
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(family.help, /*quotes=*/false), "\n# TYPE ", name, " ",
                    TypeName(static_cast<int>(family.type)), "\n");
    for (const auto& [labels, s] : family.series) {
      switch (family.type) {
        case Type::kCounter:
          absl::StrAppend(&out, name, labels, " ",
                          FormatValue(s.read ? s.read() : s.counter->value()), "\n");
          break;
        case Type::kGauge:
          absl::StrAppend(&out, name, labels, " ",
                          FormatValue(s.read ? s.read() : s.gauge->value()), "\n");
          break;
        case Type::kHistogram: {
          const std::vector<uint64_t> counts = s.histogram->CumulativeCounts();
          for (size_t i = 0; i < counts.size(); ++i) {
            const std::string le =
                i < family.bounds.size() ? FormatValue(family.bounds[i]) : "+Inf";
            absl::StrAppend(&out, name, "_bucket", WithLabel(labels, "le", le), " ", counts[i],
                            "\n");
          }
          absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(s.histogram->sum()), "\n",
                          name, "_count", labels, " ", s.histogram->count(), "\n");
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace kvfold::metrics
