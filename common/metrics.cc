#include "common/metrics.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "common/build_info.h"

namespace kwd {

namespace metrics_internal {

constinit thread_local size_t current_lane = 0;

namespace {

constexpr size_t kLanes = kMetricMaxWorkers + 1;
constexpr size_t kChunkBytes = kLanes * kMetricLaneSlots * sizeof(Slot);

// Lanes 0..lanes_in_use-1 may hold counts: the scrape reads only those (the
// others were never written, and reading them would map pages).
std::atomic<size_t> lanes_in_use{1};

// Chunks are never unmapped: a freed slot goes to a free list by size.
struct SlotArena {
  std::mutex mu;
  Slot* chunk = nullptr;  // the chunk being filled
  size_t used = 0;        // slots of lane 0 handed out from `chunk`
  std::map<size_t, std::vector<Slot*>> free;  // by block size
};

SlotArena& Arena() {
  static auto* arena = new SlotArena;  // lives as long as the process: counters may outlive main
  return *arena;
}

}  // namespace

uint64_t Sum(const Slot* lane0) {
  size_t lanes = lanes_in_use.load(std::memory_order_acquire);
  uint64_t total = 0;
  for (size_t lane = 0; lane < lanes; ++lane) {
    total += lane0[lane * kMetricLaneSlots].load(std::memory_order_relaxed);
  }
  return total;
}

Slot* AllocateSlots(size_t count) {
  if (count == 0 || count > kMetricLaneSlots) {
    std::abort();
  }
  SlotArena& arena = Arena();
  std::lock_guard lock(arena.mu);
  if (auto it = arena.free.find(count); it != arena.free.end() && !it->second.empty()) {
    Slot* first = it->second.back();
    it->second.pop_back();
    return first;
  }
  if (arena.chunk == nullptr || arena.used + count > kMetricLaneSlots) {
    void* chunk = ::mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (chunk == MAP_FAILED) {
      throw std::bad_alloc();
    }
    arena.chunk = static_cast<Slot*>(chunk);
    arena.used = 0;
  }
  Slot* first = arena.chunk + arena.used;
  arena.used += count;
  return first;
}

void FreeSlots(Slot* first, size_t count) {
  size_t lanes = lanes_in_use.load(std::memory_order_acquire);
  for (size_t lane = 0; lane < lanes; ++lane) {
    for (size_t i = 0; i < count; ++i) {
      Slot& slot = first[lane * kMetricLaneSlots + i];
      if (slot.load(std::memory_order_relaxed) != 0) {  // untouched pages stay unbacked
        slot.store(0, std::memory_order_relaxed);
      }
    }
  }
  SlotArena& arena = Arena();
  std::lock_guard lock(arena.mu);
  arena.free[count].push_back(first);
}

}  // namespace metrics_internal

void SetMetricsWorker(int worker_id) {
  using metrics_internal::lanes_in_use;
  if (worker_id < 0 || static_cast<size_t>(worker_id) >= kMetricMaxWorkers) {
    metrics_internal::current_lane = 0;
    return;
  }
  size_t lane = static_cast<size_t>(worker_id) + 1;
  size_t seen = lanes_in_use.load(std::memory_order_relaxed);
  while (seen < lane + 1 &&
         !lanes_in_use.compare_exchange_weak(seen, lane + 1, std::memory_order_acq_rel)) {
  }
  metrics_internal::current_lane = lane;
}

void Gauge::Add(double delta) {
  size_t lane = metrics_internal::current_lane;
  metrics_internal::Slot& slot = slot_[lane * kMetricLaneSlots];
  uint64_t old_bits = slot.load(std::memory_order_relaxed);
  if (lane != 0) {
    slot.store(std::bit_cast<uint64_t>(std::bit_cast<double>(old_bits) + delta),
               std::memory_order_relaxed);
    return;
  }
  while (!slot.compare_exchange_weak(
      old_bits, std::bit_cast<uint64_t>(std::bit_cast<double>(old_bits) + delta),
      std::memory_order_relaxed)) {
  }
}

double Gauge::Value() const {
  size_t lanes = metrics_internal::lanes_in_use.load(std::memory_order_acquire);
  double total = std::bit_cast<double>(slot_->load(std::memory_order_relaxed));
  for (size_t lane = 1; lane < lanes; ++lane) {
    total += std::bit_cast<double>(slot_[lane * kMetricLaneSlots].load(std::memory_order_relaxed));
  }
  return total;
}

namespace {

std::shared_ptr<const std::vector<double>> SortedBounds(std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  return std::make_shared<const std::vector<double>>(std::move(bounds));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : Histogram(SortedBounds(std::move(upper_bounds))) {}

Histogram::Histogram(std::shared_ptr<const std::vector<double>> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      slots_(metrics_internal::AllocateSlots(bounds_->size() + 2)) {}

Histogram::~Histogram() { metrics_internal::FreeSlots(slots_, bounds_->size() + 2); }

void Histogram::Observe(double value) {
  const std::vector<double>& bounds = *bounds_;
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  metrics_internal::Add(slots_ + i, 1);
  if (value > 0) {
    metrics_internal::Add(slots_ + bounds.size() + 1,
                          static_cast<uint64_t>(std::llround(value * 1e9)));
  }
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += metrics_internal::Sum(slots_ + i);
    out[i] = running;
  }
  return out;
}

double Histogram::Sum() const {
  return static_cast<double>(metrics_internal::Sum(slots_ + bounds_->size() + 1)) / 1e9;
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

std::string FormatMetricValue(double v) {
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  if (std::isnan(v)) {
    return "NaN";
  }
  // The shortest digits that read back as `v` (0.00025, not
  // 0.00025000000000000001), written as plain decimals unless the exponent is
  // below -4 or above 20, as Go's client does for bucket bounds (0.0001, 10).
  char buf[400];
  auto scientific = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view text(buf, static_cast<size_t>(scientific.ptr - buf));
  int exponent = 0;
  std::string_view exponent_text = text.substr(text.find('e') + 1);
  if (exponent_text.starts_with('+')) {
    exponent_text.remove_prefix(1);
  }
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  if (exponent < -4 || exponent > 20) {
    return std::string(text);
  }
  auto fixed = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, fixed.ptr);
}

namespace {

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) {
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
  out += '}';
  return out;
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
    it = families_.emplace(std::string(name), Family{std::string(help), type, nullptr, {}}).first;
  }
  // A family registered twice with another type is a programming error.
  if (it->second.type != type) {
    std::abort();
  }
  return it->second.children[RenderLabels(labels)];
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     const Labels& labels) {
  return *CounterPtr(name, help, labels);
}

std::shared_ptr<Counter> MetricsRegistry::CounterPtr(std::string_view name, std::string_view help,
                                                     const Labels& labels) {
  std::lock_guard lock(mu_);
  Child& child = ChildFor(name, help, Type::kCounter, labels);
  if (!child.metric) {
    child.metric = std::make_shared<Counter>();
  }
  return std::static_pointer_cast<Counter>(child.metric);
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 const Labels& labels) {
  std::lock_guard lock(mu_);
  Child& child = ChildFor(name, help, Type::kGauge, labels);
  if (!child.metric) {
    child.metric = std::make_shared<Gauge>();
  }
  return *std::static_pointer_cast<Gauge>(child.metric);
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
  if (!child.metric) {
    // The children of a family share their bounds when they are the same.
    Family& family = families_.find(name)->second;
    std::sort(upper_bounds.begin(), upper_bounds.end());
    if (family.bounds == nullptr || *family.bounds != upper_bounds) {
      family.bounds = std::make_shared<const std::vector<double>>(std::move(upper_bounds));
    }
    child.metric = std::make_shared<Histogram>(family.bounds);
  }
  return std::static_pointer_cast<Histogram>(child.metric);
}

void MetricsRegistry::AddCallbackGauge(std::string_view name, std::string_view help,
                                       const Labels& labels, std::function<double()> read) {
  std::lock_guard lock(mu_);
  ChildFor(name, help, Type::kGauge, labels).callback =
      std::make_unique<std::function<double()>>(std::move(read));
}

void MetricsRegistry::AddCallbackCounter(std::string_view name, std::string_view help,
                                         const Labels& labels, std::function<double()> read) {
  std::lock_guard lock(mu_);
  ChildFor(name, help, Type::kCounter, labels).callback =
      std::make_unique<std::function<double()>>(std::move(read));
}

namespace {

// Whether the rendered labels `{k="v",...}` have label `key` with an
// (escaped) value in `keep` (sorted); nullopt without label `key`.
std::optional<bool> RenderedLabelIn(std::string_view rendered, std::string_view key,
                                    const std::vector<std::string>& keep) {
  size_t pos = 1;  // after '{'
  while (pos < rendered.size() && rendered[pos] != '}') {
    size_t eq = rendered.find('=', pos);
    if (eq == std::string_view::npos || eq + 1 >= rendered.size()) {
      return std::nullopt;
    }
    std::string_view name = rendered.substr(pos, eq - pos);
    size_t begin = eq + 2;  // after '="'
    size_t end = begin;
    while (end < rendered.size() && rendered[end] != '"') {
      end += rendered[end] == '\\' ? 2 : 1;
    }
    if (name == key) {
      return std::binary_search(keep.begin(), keep.end(), rendered.substr(begin, end - begin));
    }
    pos = end + 1;
    if (pos < rendered.size() && rendered[pos] == ',') {
      ++pos;
    }
  }
  return std::nullopt;
}

}  // namespace

void MetricsRegistry::RetainLabelValues(std::string_view family, std::string_view key,
                                        const std::vector<std::string>& keep) {
  std::vector<std::string> escaped;
  escaped.reserve(keep.size());
  for (const std::string& value : keep) {
    escaped.push_back(EscapeLabelValue(value));
  }
  std::sort(escaped.begin(), escaped.end());
  std::lock_guard lock(mu_);
  auto it = families_.find(family);
  if (it == families_.end()) {
    return;
  }
  auto& children = it->second.children;
  for (auto c = children.begin(); c != children.end();) {
    bool drop = RenderedLabelIn(c->first, key, escaped) == false;
    c = drop ? children.erase(c) : std::next(c);
  }
}

std::string MetricsRegistry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    if (family.children.empty()) {
      continue;
    }
    out += "# HELP " + name + " " + family.help + "\n";
    out += "# TYPE " + name + " " + TypeName(family.type) + "\n";
    for (const auto& [label_key, child] : family.children) {
      if (family.type == Type::kCounter && child.metric) {
        auto* counter = static_cast<const Counter*>(child.metric.get());
        out += name + label_key + " " + std::to_string(counter->Value()) + "\n";
      } else if (child.callback) {
        out += name + label_key + " " + FormatMetricValue((*child.callback)()) + "\n";
      } else if (family.type == Type::kGauge && child.metric) {
        auto* gauge = static_cast<const Gauge*>(child.metric.get());
        out += name + label_key + " " + FormatMetricValue(gauge->Value()) + "\n";
      } else if (family.type == Type::kHistogram && child.metric) {
        auto* histogram = static_cast<const Histogram*>(child.metric.get());
        const auto& bounds = histogram->UpperBounds();
        auto counts = histogram->CumulativeCounts();
        // The labels with le="..." last.
        std::string_view labels_open =
            label_key.empty() ? std::string_view("{")
                              : std::string_view(label_key).substr(0, label_key.size() - 1);
        std::string_view separator = label_key.empty() ? "" : ",";
        for (size_t i = 0; i <= bounds.size(); ++i) {
          std::string le = i < bounds.size() ? FormatMetricValue(bounds[i]) : "+Inf";
          out += name;
          out += "_bucket";
          out += labels_open;
          out += separator;
          out += "le=\"" + le + "\"} " + std::to_string(counts[i]) + "\n";
        }
        out += name + "_sum" + label_key + " " + FormatMetricValue(histogram->Sum()) + "\n";
        out += name + "_count" + label_key + " " + std::to_string(counts.back()) + "\n";
      }
    }
  }
  return out;
}

namespace {

std::string ReadProcFile(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The fields of /proc/self/stat after "(comm)": index 0 is field 3 (state).
std::vector<std::string> ProcSelfStatFields() {
  std::string stat = ReadProcFile("/proc/self/stat");
  size_t paren = stat.rfind(')');
  std::vector<std::string> fields;
  if (paren == std::string::npos) {
    return fields;
  }
  std::istringstream in(stat.substr(paren + 1));
  for (std::string field; in >> field;) {
    fields.push_back(std::move(field));
  }
  return fields;
}

// Unix time the process started: /proc/self/stat field 22 (clock ticks after
// boot) plus btime from /proc/stat; now when /proc does not tell.
double ProcessStartTime() {
  auto fields = ProcSelfStatFields();
  std::istringstream stat(ReadProcFile("/proc/stat"));
  double boot = -1;
  for (std::string line; std::getline(stat, line);) {
    if (line.rfind("btime ", 0) == 0) {
      boot = std::strtod(line.c_str() + 6, nullptr);
    }
  }
  long ticks = ::sysconf(_SC_CLK_TCK);
  if (fields.size() > 19 && boot > 0 && ticks > 0) {
    return boot + std::strtod(fields[19].c_str(), nullptr) / static_cast<double>(ticks);
  }
  return static_cast<double>(::time(nullptr));
}

// /proc/self/statm: size and resident, in pages.
double StatmBytes(int index) {
  std::istringstream in(ReadProcFile("/proc/self/statm"));
  double pages[2] = {0, 0};
  in >> pages[0] >> pages[1];
  return pages[index] * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    return 0;
  }
  double count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') {
      ++count;
    }
  }
  ::closedir(dir);
  return count - 1;  // the descriptor opendir used
}

}  // namespace

void RegisterStandardMetrics(MetricsRegistry& registry) {
  registry
      .GetGauge("kwd_build_info", "The kwd build (value 1), labelled with its version and revision.",
                {{"version", std::string(KwdVersion())}, {"revision", std::string(KwdRevision())}})
      .Set(1);
  registry.AddCallbackCounter("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.", {}, [] {
                                rusage usage{};
                                ::getrusage(RUSAGE_SELF, &usage);
                                auto seconds = [](const timeval& t) {
                                  return static_cast<double>(t.tv_sec) +
                                         static_cast<double>(t.tv_usec) / 1e6;
                                };
                                return seconds(usage.ru_utime) + seconds(usage.ru_stime);
                              });
  registry.AddCallbackGauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
                            [] { return StatmBytes(1); });
  registry.AddCallbackGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {},
                            [] { return StatmBytes(0); });
  registry.AddCallbackGauge("process_open_fds", "Number of open file descriptors.", {}, OpenFds);
  registry.AddCallbackGauge("process_max_fds", "Maximum number of open file descriptors.", {}, [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
      return -1.0;
    }
    return static_cast<double>(limit.rlim_cur);
  });
  registry
      .GetGauge("process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.")
      .Set(ProcessStartTime());
}

}  // namespace kwd
