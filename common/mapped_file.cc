#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvfold {
namespace {

struct MmapRegion {
  void* addr = nullptr;
  size_t size = 0;
  ~MmapRegion() {
    if (addr != nullptr && addr != MAP_FAILED) munmap(addr, size);
  }
};

}  // namespace

absl::StatusOr<MappedFile> MapReadOnly(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path));
  }
  auto region = std::make_shared<MmapRegion>();
  region->size = static_cast<size_t>(st.st_size);
  if (region->size > 0) region->addr = mmap(nullptr, region->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (region->size > 0 && region->addr == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap ", path));
  }
  return MappedFile{.bytes = std::string_view(static_cast<const char*>(region->addr), region->size),
                    .keepalive = region};
}

}  // namespace kvfold
