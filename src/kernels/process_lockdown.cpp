#include "process_lockdown.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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

int allow_beneath(int ruleset, const char* path, uint64_t rights) {
  const int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno;
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
  for (const std::string& folder : folders)
    if (!err) err = allow_beneath(ruleset, folder.c_str(), rights);
  // A file (not a folder) takes only file rights.
  const uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kTruncateRight : 0);
  if (!err) err = allow_beneath(ruleset, "/dev/null", file_rights);
  if (!err && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) err = errno;
  if (!err && syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) err = errno;
  ::close(ruleset);
  return err;
}

int seal_code(SealScope scope, int* sealed) {
  if (sealed) *sealed = 0;
  std::string exe;
  if (scope == SealScope::own_executable) {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return errno ? errno : ENOENT;
    exe.assign(buf, size_t(n));
  }
  std::ifstream maps("/proc/self/maps");
  if (!maps) return ENOENT;
  // Read whole first: sealing does not change the list, but reading while changing nothing is simplest.
  std::vector<std::string> lines;
  for (std::string line; std::getline(maps, line);) lines.push_back(line);
  int first_error = 0;
  for (const std::string& line : lines) {
    // start-end perms offset dev inode [path]
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    unsigned long inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode)) continue;
    std::getline(in >> std::ws, path);
    if (inode == 0 || path.empty() || path[0] == '[' || perms.size() < 2 || perms[1] == 'w') continue;
    if (scope == SealScope::own_executable && path != exe) continue;
    unsigned long start = 0, end = 0;
    if (std::sscanf(range.c_str(), "%lx-%lx", &start, &end) != 2 || end <= start) continue;
    if (syscall(kMsealNr, start, end - start, 0) == 0) {
      if (sealed) ++*sealed;
    } else {
      if (errno == ENOSYS) return ENOSYS;
      if (!first_error) first_error = errno;
    }
  }
  return first_error;
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
