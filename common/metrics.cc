#include "common/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace kwd {

void Gauge::Add(double delta) {
  uint64_t old_bits = bits_.load(std::memory_order_relaxed);
  while (!bits_.compare_exchange_weak(
      old_bits, std::bit_cast<uint64_t>(std::bit_cast<double>(old_bits) + delta),
      std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    buckets_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double value) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  if (value > 0) {
    sum_nanos_.fetch_add(static_cast<uint64_t>(std::llround(value * 1e9)),
                         std::memory_order_relaxed);
  }
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

double Histogram::Sum() const {
  return static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) / 1e9;
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5, 5, 10};
}

size_t Utf8SequenceLength(std::string_view text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(0);
  size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    low = lead == 0xe0 ? 0xa0 : 0x80;
    high = lead == 0xed ? 0x9f : 0xbf;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    low = lead == 0xf0 ? 0x90 : 0x80;
    high = lead == 0xf4 ? 0x8f : 0xbf;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) {
    return 0;
  }
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) {
      return 0;
    }
  }
  return length;
}

std::string EscapeLabelValue(std::string_view value) {
  // The text format's escapes are \\, \" and \n; a label value must be
  // UTF-8. Other control characters and bytes that are not UTF-8 become the
  // text \xNN (an escaped backslash, then xNN): one sample stays one line
  // and every parser reads the value back.
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    char c = value[i];
    auto byte = static_cast<unsigned char>(c);
    size_t utf8 = byte >= 0x80 ? Utf8SequenceLength(value.substr(i)) : 0;
    if (utf8 > 0) {
      out.append(value.substr(i, utf8));
      i += utf8;
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else if (byte < 0x20 || byte >= 0x7f) {
      out += "\\\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
    ++i;
  }
  return out;
}

namespace {

std::string RenderLabels(const Labels& labels, std::string_view extra_key = {},
                         std::string_view extra_value = {}) {
  if (labels.empty() && extra_key.empty()) {
    return {};
  }
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) {
      out += ',';
    }
    first = false;
    out += k;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  }
  if (!extra_key.empty()) {
    if (!first) {
      out += ',';
    }
    out += extra_key;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
  return out;
}

std::string FormatDouble(double v) {
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  if (std::isnan(v)) {
    return "NaN";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const char* TypeName(MetricsRegistry::Type type) {
  switch (type) {
    case MetricsRegistry::Type::kCounter:
      return "counter";
    case MetricsRegistry::Type::kGauge:
      return "gauge";
    case MetricsRegistry::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

MetricsRegistry::Child& MetricsRegistry::ChildFor(std::string_view name, std::string_view help,
                                                  Type type, const Labels& labels) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{std::string(help), type, {}}).first;
  }
  // A family registered twice with another type is a programming error.
  if (it->second.type != type) {
    std::abort();
  }
  std::string key = RenderLabels(labels);
  auto& child = it->second.children[key];
  if (child.labels.empty()) {
    child.labels = labels;
  }
  return child;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     const Labels& labels) {
  return *CounterPtr(name, help, labels);
}

std::shared_ptr<Counter> MetricsRegistry::CounterPtr(std::string_view name, std::string_view help,
                                                     const Labels& labels) {
  std::lock_guard lock(mu_);
  Child& child = ChildFor(name, help, Type::kCounter, labels);
  if (!child.counter) {
    child.counter = std::make_shared<Counter>();
  }
  return child.counter;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 const Labels& labels) {
  std::lock_guard lock(mu_);
  Child& child = ChildFor(name, help, Type::kGauge, labels);
  if (!child.gauge) {
    child.gauge = std::make_shared<Gauge>();
  }
  return *child.gauge;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const Labels& labels, std::vector<double> upper_bounds) {
  return *HistogramPtr(name, help, labels, std::move(upper_bounds));
}

std::shared_ptr<Histogram> MetricsRegistry::HistogramPtr(std::string_view name,
                                                         std::string_view help,
                                                         const Labels& labels,
                                                         std::vector<double> upper_bounds) {
  std::lock_guard lock(mu_);
  Child& child = ChildFor(name, help, Type::kHistogram, labels);
  if (!child.histogram) {
    child.histogram = std::make_shared<Histogram>(std::move(upper_bounds));
  }
  return child.histogram;
}

void MetricsRegistry::AddCallbackGauge(std::string_view name, std::string_view help,
                                       const Labels& labels, std::function<double()> read) {
  std::lock_guard lock(mu_);
  ChildFor(name, help, Type::kGauge, labels).callback = std::move(read);
}

void MetricsRegistry::RetainLabelValues(std::string_view family, std::string_view key,
                                        const std::vector<std::string>& keep) {
  std::lock_guard lock(mu_);
  auto it = families_.find(family);
  if (it == families_.end()) {
    return;
  }
  auto& children = it->second.children;
  for (auto c = children.begin(); c != children.end();) {
    bool drop = false;
    for (const auto& [k, v] : c->second.labels) {
      if (k == key && !std::binary_search(keep.begin(), keep.end(), v)) {
        drop = true;
      }
    }
    c = drop ? children.erase(c) : std::next(c);
  }
}

std::string MetricsRegistry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  out.reserve(4096);
  for (const auto& [name, family] : families_) {
    if (family.children.empty()) {
      continue;
    }
    out += "# HELP " + name + " " + family.help + "\n";
    out += "# TYPE " + name + " " + TypeName(family.type) + "\n";
    for (const auto& [label_key, child] : family.children) {
      if (child.counter) {
        out += name + label_key + " " + std::to_string(child.counter->Value()) + "\n";
      } else if (child.gauge || child.callback) {
        double v = child.callback ? child.callback() : child.gauge->Value();
        out += name + label_key + " " + FormatDouble(v) + "\n";
      } else if (child.histogram) {
        const auto& bounds = child.histogram->UpperBounds();
        auto counts = child.histogram->CumulativeCounts();
        for (size_t i = 0; i <= bounds.size(); ++i) {
          std::string le = i < bounds.size() ? FormatDouble(bounds[i]) : "+Inf";
          out += name + "_bucket" + RenderLabels(child.labels, "le", le) + " " +
                 std::to_string(counts[i]) + "\n";
        }
        out += name + "_sum" + label_key + " " + FormatDouble(child.histogram->Sum()) + "\n";
        out += name + "_count" + label_key + " " + std::to_string(counts.back()) + "\n";
      }
    }
  }
  return out;
}

}  // namespace kwd
