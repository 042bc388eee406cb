// A strict reader of the Prometheus text exposition format (0.0.4) for tests: it parses
// every line of a /metrics page and reports what a scraper would reject: a sample without
// # TYPE (and, stricter than Prometheus, without # HELP), a malformed line or label set, a
// histogram whose buckets are not cumulative or whose +Inf bucket differs from _count.
#ifndef KVFOLD_TESTS_COMMON_PROMETHEUS_TEXT_H_
#define KVFOLD_TESTS_COMMON_PROMETHEUS_TEXT_H_

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kvfold::testing {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromPage {
  std::map<std::string, std::string> help;  // family -> help
  std::map<std::string, std::string> type;  // family -> type
  std::vector<PromSample> samples;
  std::vector<std::string> errors;

  // The value of `name` with exactly these labels; NaN when absent.
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    for (const PromSample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return std::nan("");
  }
};

inline std::string FamilyOf(const std::string& sample,
                            const std::map<std::string, std::string>& type) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = type.find(base);
      if (it != type.end() && it->second == "histogram") return base;
    }
  }
  return sample;
}

inline bool ParseLabels(const std::string& text, std::map<std::string, std::string>* out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t eq = text.find('=', i);
    if (eq == std::string::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    const std::string name = text.substr(i, eq - i);
    std::string value;
    size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\\' && j + 1 < text.size()) {
        ++j;
        value += text[j] == 'n' ? '\n' : text[j];
      } else {
        value += text[j];
      }
    }
    if (j >= text.size() || name.empty()) return false;
    (*out)[name] = value;
    i = j + 1;
    if (i < text.size()) {
      if (text[i] != ',') return false;
      ++i;
    }
  }
  return true;
}

inline PromPage ParsePrometheusText(const std::string& text) {
  PromPage page;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      if (sp == std::string::npos) {
        page.errors.push_back("line " + std::to_string(n) + ": bare " + line);
        continue;
      }
      (line[2] == 'H' ? page.help : page.type)[rest.substr(0, sp)] = rest.substr(sp + 1);
      continue;
    }
    if (line[0] == '#') continue;
    PromSample s;
    const size_t brace = line.find('{');
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) {
      page.errors.push_back("line " + std::to_string(n) + ": no value");
      continue;
    }
    if (brace != std::string::npos && brace < sp) {
      const size_t close = line.rfind('}', sp);
      if (close == std::string::npos ||
          !ParseLabels(line.substr(brace + 1, close - brace - 1), &s.labels)) {
        page.errors.push_back("line " + std::to_string(n) + ": bad labels: " + line);
        continue;
      }
      s.name = line.substr(0, brace);
    } else {
      s.name = line.substr(0, sp);
    }
    const std::string v = line.substr(sp + 1);
    char* end = nullptr;
    s.value = v == "+Inf" ? HUGE_VAL : v == "-Inf" ? -HUGE_VAL : std::strtod(v.c_str(), &end);
    if (v != "+Inf" && v != "-Inf" && v != "NaN" && (end == nullptr || *end != '\0')) {
      page.errors.push_back("line " + std::to_string(n) + ": bad value: " + line);
      continue;
    }
    const std::string family = FamilyOf(s.name, page.type);
    if (!page.type.count(family)) page.errors.push_back(s.name + ": sample before # TYPE");
    if (!page.help.count(family)) page.errors.push_back(s.name + ": no # HELP");
    page.samples.push_back(s);
  }
  // Histograms: cumulative buckets, +Inf == _count.
  for (const auto& [family, type] : page.type) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<double>> buckets;
    for (const PromSample& s : page.samples) {
      if (s.name != family + "_bucket") continue;
      auto key = s.labels;
      key.erase("le");
      buckets[key].push_back(s.value);
      if (s.labels.count("le") && s.labels.at("le") == "+Inf" &&
          page.Value(family + "_count", key) != s.value) {
        page.errors.push_back(family + ": +Inf bucket != _count");
      }
    }
    for (const auto& [labels, counts] : buckets) {
      for (size_t i = 1; i < counts.size(); ++i) {
        if (counts[i] < counts[i - 1]) page.errors.push_back(family + ": buckets not cumulative");
      }
    }
  }
  return page;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_COMMON_PROMETHEUS_TEXT_H_
