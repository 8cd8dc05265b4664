#include "process_lockdown.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/landlock.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace turnrl::sandbox_detail {
namespace {

#ifndef __NR_mseal
constexpr long kMsealNr = 462;  // the same number on x86_64 and in the generic table (aarch64)
#else
constexpr long kMsealNr = __NR_mseal;
#endif

// Landlock's filesystem rights that change something, by the ABI that added them (the headers of
// an older distribution may lack the newer names).
constexpr uint64_t kWriteRightsAbi1 =
    LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
    LANDLOCK_ACCESS_FS_MAKE_SYM;
constexpr uint64_t kReferRight = uint64_t(1) << 13;     // ABI 2: rename and link across folders
constexpr uint64_t kTruncateRight = uint64_t(1) << 14;  // ABI 3: truncate, O_TRUNC

int landlock_abi() {
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : int(abi);
}

// A rule for `path` and what lies beneath it. A path that is not a folder keeps only the rights a
// file can take (`file_rights`); a missing one is left out when `missing_ok`.
int allow_beneath(int ruleset, const char* path, uint64_t rights, uint64_t file_rights, bool missing_ok = false) {
  const int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return missing_ok && (errno == ENOENT || errno == ENOTDIR) ? 0 : errno;
  struct stat st {};
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= file_rights;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = rights;
  rule.parent_fd = fd;
  const long rc = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

int confine_writes_beneath(const std::vector<std::string>& folders) {
  const int abi = landlock_abi();
  if (abi < 1) return ENOSYS;
  uint64_t rights = kWriteRightsAbi1;
  if (abi >= 2) rights |= kReferRight;
  if (abi >= 3) rights |= kTruncateRight;
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = rights;
  // Only the first field: the header's struct may be larger than this kernel knows.
  const int ruleset = int(syscall(SYS_landlock_create_ruleset, &attr, sizeof attr.handled_access_fs, 0));
  if (ruleset < 0) return errno;
  int err = 0;
  const uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kTruncateRight : 0);
  for (const std::string& folder : folders)
    if (!err) err = allow_beneath(ruleset, folder.c_str(), rights, file_rights);
  if (!err) err = allow_beneath(ruleset, "/dev/null", file_rights, file_rights);
  if (!err && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) err = errno;
  if (!err && syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) err = errno;
  ::close(ruleset);
  return err;
}

int ruleset_confining_reads(const std::vector<std::string>& readable, const std::vector<std::string>& writable) {
  const int abi = landlock_abi();
  if (abi < 1) return -ENOSYS;
  uint64_t write_rights = kWriteRightsAbi1;
  if (abi >= 2) write_rights |= kReferRight;
  if (abi >= 3) write_rights |= kTruncateRight;
  constexpr uint64_t kReadRights = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  // What a rule on a file (not a folder) may hold.
  const uint64_t file_rights =
      LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kTruncateRight : 0);
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = kReadRights | write_rights;
  const int ruleset = int(syscall(SYS_landlock_create_ruleset, &attr, sizeof attr.handled_access_fs, 0));
  if (ruleset < 0) return -errno;
  int err = 0;
  for (const std::string& path : readable)
    if (!err) err = allow_beneath(ruleset, path.c_str(), kReadRights, file_rights, /*missing_ok=*/true);
  for (const std::string& path : writable)
    if (!err) err = allow_beneath(ruleset, path.c_str(), kReadRights | write_rights, file_rights, /*missing_ok=*/true);
  if (!err) err = allow_beneath(ruleset, "/dev/null", file_rights, file_rights);
  if (err) {
    ::close(ruleset);
    return -err;
  }
  return ruleset;
}

int restrict_to_ruleset(int ruleset) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  return syscall(SYS_landlock_restrict_self, ruleset, 0) == 0 ? 0 : errno;
}

namespace {

// One line of /proc/self/maps: start-end perms offset dev inode [path].
struct OwnMapping {
  unsigned long start = 0, end = 0, inode = 0;
  std::string perms, path;
};

// This process's mappings, read whole before any is changed (sealing does not change the list, but
// reading while changing nothing is simplest). Lines that do not parse are left out.
std::vector<OwnMapping> read_own_mappings() {
  std::vector<OwnMapping> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, offset, dev;
    OwnMapping m;
    if (!(in >> range >> m.perms >> offset >> dev >> m.inode)) continue;
    std::getline(in >> std::ws, m.path);
    if (std::sscanf(range.c_str(), "%lx-%lx", &m.start, &m.end) != 2 || m.end <= m.start) continue;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

long mseal_number() { return kMsealNr; }

int seal_code(SealScope scope) {
  std::string exe;
  if (scope == SealScope::own_executable) {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return errno ? errno : ENOENT;
    exe.assign(buf, size_t(n));
  }
  const std::vector<OwnMapping> mappings = read_own_mappings();
  if (mappings.empty()) return ENOENT;
  int first_error = 0;
  for (const OwnMapping& m : mappings) {
    // The kernel's own mappings of the clock code and data ([vdso], [vvar], [vvar_vclock]) too: a
    // writable vDSO would run candidate code at every clock read of the harness.
    const bool clock_mapping = m.path == "[vdso]" || m.path.rfind("[vvar", 0) == 0;
    if (!clock_mapping) {
      if (m.inode == 0 || m.path.empty() || m.path[0] == '[' || m.perms.size() < 2 || m.perms[1] == 'w') continue;
      if (scope == SealScope::own_executable && m.path != exe) continue;
    }
    if (syscall(kMsealNr, m.start, m.end - m.start, 0) != 0) {
      if (errno == ENOSYS) return ENOSYS;
      if (!first_error) first_error = errno;
    }
  }
  return first_error;
}

int seal_loaded_object(const std::string& absolute_path, std::string& why) {
  const std::vector<OwnMapping> mappings = read_own_mappings();
  if (mappings.empty()) return ENOENT;
  std::vector<std::pair<unsigned long, unsigned long>> sealable;
  for (const OwnMapping& m : mappings) {
    if (m.path != absolute_path && m.path != absolute_path + " (deleted)") continue;
    if (m.perms.size() < 4) continue;
    if ((m.perms[1] == 'w' && m.perms[2] == 'x') || m.perms[3] == 's') {
      why = fmt::format("a mapping of the loaded object is {} ({}): its code could change after loading",
                        m.perms[3] == 's' ? "shared" : "writable and executable", m.perms);
      return EPERM;
    }
    if (m.perms[1] != 'w') sealable.emplace_back(m.start, m.end);
  }
  for (const auto& [start, end] : sealable)
    if (syscall(kMsealNr, start, end - start, 0) != 0) {
      if (errno == ENOSYS) return ENOSYS;
      why = fmt::format("sealing the loaded object's mapping at {:#x} failed: {}", start, std::strerror(errno));
      return errno;
    }
  return 0;
}

namespace {

// The guard's page: at an address fixed in this (sealed) code, so that a candidate cannot point the
// check at a copy of its own; read-only and sealed once filled.
constexpr uintptr_t kGuardAddress = 0x5e7a00000000ull;
constexpr uint64_t kGuardMagic = 0x746f672d6c72746eull;
constexpr size_t kMaxGuardedRanges = 256;

struct GuardedRange {
  uint64_t start = 0, bytes = 0, copy_offset = 0;
};
struct GuardHeader {
  uint64_t magic = 0;
  uint64_t count = 0;
  GuardedRange ranges[kMaxGuardedRanges];
};

// The .got and .got.plt sections of a loaded object that lie outside its read-only-after-
// relocation segment (PT_GNU_RELRO), from the section headers of its file.
void writable_gots(const dl_phdr_info& info, std::vector<GuardedRange>& out) {
  if (!info.dlpi_name || !info.dlpi_name[0]) return;  // the executable (full RELRO), the vDSO
  std::ifstream f(info.dlpi_name, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum)
    return;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  f.seekg(std::streamoff(eh.e_shoff));
  if (!f.read(reinterpret_cast<char*>(sh.data()), std::streamsize(sh.size() * sizeof(Elf64_Shdr)))) return;
  std::string names(sh[eh.e_shstrndx].sh_size, '\0');
  f.seekg(std::streamoff(sh[eh.e_shstrndx].sh_offset));
  if (!f.read(names.data(), std::streamsize(names.size()))) return;
  uintptr_t relro_start = 0, relro_end = 0;
  for (int i = 0; i < info.dlpi_phnum; ++i)
    if (info.dlpi_phdr[i].p_type == PT_GNU_RELRO) {
      relro_start = info.dlpi_addr + info.dlpi_phdr[i].p_vaddr;
      relro_end = relro_start + info.dlpi_phdr[i].p_memsz;
    }
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_name >= names.size() || s.sh_size == 0) continue;
    const char* name = names.c_str() + s.sh_name;
    if (std::strcmp(name, ".got") != 0 && std::strcmp(name, ".got.plt") != 0) continue;
    const uintptr_t start = info.dlpi_addr + s.sh_addr, end = start + s.sh_size;
    // The part outside RELRO only (libstdc++'s .got.plt starts with three reserved slots inside it,
    // read-only after relocation: writing them back would fault).
    const auto keep = [&](uintptr_t a, uintptr_t b) {
      if (b > a) out.push_back({a, b - a, 0});
    };
    if (relro_end <= start || relro_start >= end) {
      keep(start, end);
    } else {
      keep(start, std::min(end, relro_start));
      keep(std::max(start, relro_end), end);
    }
  }
}

}  // namespace

long guard_library_gots() {
  std::vector<GuardedRange> ranges;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        writable_gots(*info, *static_cast<std::vector<GuardedRange>*>(data));
        return 0;
      },
      &ranges);
  if (ranges.size() > kMaxGuardedRanges) ranges.resize(kMaxGuardedRanges);
  size_t bytes = sizeof(GuardHeader);
  for (GuardedRange& r : ranges) {
    r.copy_offset = bytes;
    bytes += r.bytes;
  }
  void* page = mmap(reinterpret_cast<void*>(kGuardAddress), bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (page == MAP_FAILED) return -errno;
  if (reinterpret_cast<uintptr_t>(page) != kGuardAddress) {  // a kernel that ignores the flag
    munmap(page, bytes);
    return -EEXIST;
  }
  auto* header = static_cast<GuardHeader*>(page);
  header->count = ranges.size();
  long guarded = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    header->ranges[i] = ranges[i];
    std::memcpy(static_cast<char*>(page) + ranges[i].copy_offset, reinterpret_cast<const void*>(ranges[i].start),
                ranges[i].bytes);
    guarded += long(ranges[i].bytes);
  }
  header->magic = kGuardMagic;
  mprotect(page, bytes, PROT_READ);
  syscall(kMsealNr, page, (bytes + 4095) & ~size_t(4095), 0);
  return guarded;
}

bool library_gots_rewritten() {
  const auto* header = reinterpret_cast<const GuardHeader*>(kGuardAddress);
  // Mapped only where guard_library_gots ran: whether the page is there, asked without touching it
  // (and asked every time: a flag kept in writable memory the candidate could clear).
  unsigned char in_core = 0;
  if (mincore(reinterpret_cast<void*>(kGuardAddress), 1, &in_core) != 0 || header->magic != kGuardMagic) return false;
  bool changed = false;
  for (uint64_t i = 0; i < header->count && i < kMaxGuardedRanges; ++i) {
    const GuardedRange& r = header->ranges[i];
    const char* copy = reinterpret_cast<const char*>(header) + r.copy_offset;
    if (std::memcmp(reinterpret_cast<const void*>(r.start), copy, r.bytes) != 0) {
      changed = true;
      std::memcpy(reinterpret_cast<void*>(r.start), copy, r.bytes);
    }
  }
  return changed;
}

LockdownSupport lockdown_support() {
  LockdownSupport s;
  s.landlock_abi = landlock_abi();
  // A page of our own to seal: a sealed mapping stays until the process exits, one page.
  void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page != MAP_FAILED) s.mseal = syscall(kMsealNr, page, 4096, 0) == 0;
  return s;
}

}  // namespace turnrl::sandbox_detail
