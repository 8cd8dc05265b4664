#include "code_sampler.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace turnrl::sandbox_detail {
namespace {

int open_task_clock(pid_t tid, int64_t period_ns) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.sample_period = uint64_t(std::max<int64_t>(period_ns, 1000));
  // The time on CLOCK_MONOTONIC, the clock the worker's library marks carry: a sample is placed
  // inside or outside a served routine's call by it.
  attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TIME;
  attr.use_clockid = 1;
  attr.clockid = CLOCK_MONOTONIC;
  attr.disabled = 1;
  attr.exclude_kernel = 1;  // user-space code only: what perf_event_paranoid 2 allows, and what is asked
  attr.exclude_hv = 1;
  return int(syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

std::string errno_name(int e) {
  switch (e) {
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOSYS: return "ENOSYS";
    case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH";
    case EINVAL: return "EINVAL";
    default: return fmt::format("errno {}", e);
  }
}

}  // namespace

const std::string& code_sampling_unavailable() {
  static const std::string why = [] {
    const int fd = open_task_clock(0, 100000);
    if (fd < 0) return "perf_event_open: " + errno_name(errno);
    ::close(fd);
    return std::string();
  }();
  return why;
}

ThreadSampler::ThreadSampler(pid_t tid, int64_t period_ns, int ring_pages_log2) {
  fd_ = open_task_clock(tid, period_ns);
  if (fd_ < 0) {
    error_ = fmt::format("perf_event_open on thread {}: {}", tid, errno_name(errno));
    return;
  }
  ring_bytes_ = size_t(sysconf(_SC_PAGESIZE)) * ((size_t(1) << std::clamp(ring_pages_log2, 0, 12)) + 1);
  // Writable: the kernel then never overwrites samples not yet read (it counts them as lost).
  ring_ = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (ring_ == MAP_FAILED) {
    error_ = fmt::format("mmap of the sample ring: {}", errno_name(errno));
    ring_ = nullptr;
    ::close(fd_);
    fd_ = -1;
  }
}

ThreadSampler::~ThreadSampler() {
  if (ring_) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool ThreadSampler::set_period(int64_t period_ns) {
  uint64_t period = uint64_t(std::max<int64_t>(period_ns, 1000));
  return fd_ >= 0 && ioctl(fd_, PERF_EVENT_IOC_PERIOD, &period) == 0;
}

bool ThreadSampler::enable() { return fd_ >= 0 && ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0) == 0; }
bool ThreadSampler::disable() { return fd_ >= 0 && ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0) == 0; }

int64_t ThreadSampler::drain(std::vector<CodeSample>& samples) {
  if (!ring_) return 0;
  auto* meta = static_cast<perf_event_mmap_page*>(ring_);
  const char* data = static_cast<const char*>(ring_) + meta->data_offset;
  const uint64_t size = meta->data_size;
  const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = meta->data_tail;
  int64_t lost = 0;
  // Records may wrap around the ring's end: copy each one out before reading it.
  auto copy_out = [&](uint64_t at, void* to, size_t n) {
    for (size_t done = 0; done < n;) {
      const uint64_t off = (at + done) % size;
      const size_t k = std::min<size_t>(n - done, size_t(size - off));
      std::memcpy(static_cast<char*>(to) + done, data + off, k);
      done += k;
    }
  };
  while (tail + sizeof(perf_event_header) <= head) {
    perf_event_header h{};
    copy_out(tail, &h, sizeof h);
    if (h.size < sizeof h || tail + h.size > head) break;
    if (h.type == PERF_RECORD_SAMPLE && h.size >= sizeof h + 16) {
      uint64_t ip_and_time[2] = {0, 0};  // PERF_SAMPLE_IP, then PERF_SAMPLE_TIME
      copy_out(tail + sizeof h, ip_and_time, 16);
      samples.push_back({ip_and_time[0], ip_and_time[1]});
    } else if (h.type == PERF_RECORD_LOST && h.size >= sizeof h + 16) {
      uint64_t id_and_lost[2] = {0, 0};
      copy_out(tail + sizeof h, id_and_lost, 16);
      lost += int64_t(id_and_lost[1]);
    }
    tail += h.size;
  }
  __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
  return lost;
}

std::vector<CodeMapping> parse_code_mappings(const std::string& maps) {
  std::vector<CodeMapping> out;
  std::istringstream in(maps);
  std::string line;
  while (std::getline(in, line)) {
    // start-end perms offset dev inode [path]; the path may hold spaces (" (deleted)").
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode;
    if (!(fields >> range >> perms >> offset >> dev >> inode)) continue;
    if (perms.size() < 3 || perms[2] != 'x') continue;
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    CodeMapping m;
    try {
      m.start = std::stoull(range.substr(0, dash), nullptr, 16);
      m.end = std::stoull(range.substr(dash + 1), nullptr, 16);
      m.offset = std::stoull(offset, nullptr, 16);
    } catch (const std::exception&) {
      continue;
    }
    std::string path;
    std::getline(fields, path);
    const size_t first = path.find_first_not_of(' ');
    m.name = first == std::string::npos ? "[anon]" : path.substr(first);
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const CodeMapping& a, const CodeMapping& b) { return a.start < b.start; });
  return out;
}

std::vector<CodeMapping> read_code_mappings(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/maps", pid));
  if (!f) return {};
  std::ostringstream text;
  text << f.rdbuf();
  return parse_code_mappings(text.str());
}

const CodeMapping* mapping_at(const std::vector<CodeMapping>& mappings, uint64_t ip) {
  auto it = std::upper_bound(mappings.begin(), mappings.end(), ip,
                             [](uint64_t v, const CodeMapping& m) { return v < m.start; });
  if (it == mappings.begin()) return nullptr;
  --it;
  return ip < it->end ? &*it : nullptr;
}

std::optional<bool> mapping_holds_file(pid_t pid, const CodeMapping& m, std::string_view file) {
  if (m.end <= m.start) return std::nullopt;
  std::string mem(size_t(m.end - m.start), '\0');
  for (size_t done = 0; done < mem.size();) {
    iovec local{mem.data() + done, mem.size() - done};
    iovec remote{reinterpret_cast<void*>(uintptr_t(m.start + done)), mem.size() - done};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return std::nullopt;
    done += size_t(n);
  }
  if (m.offset > file.size()) return false;
  const std::string_view from_file = file.substr(size_t(m.offset), mem.size());
  if (std::string_view(mem).substr(0, from_file.size()) != from_file) return false;
  return std::all_of(mem.begin() + std::ptrdiff_t(from_file.size()), mem.end(), [](char c) { return c == 0; });
}

}  // namespace turnrl::sandbox_detail
