// "file:///PATH": a dlpg store over Gloo's FileStore on a shared filesystem. Gloo names each
// key's file by a hash of the key, so keys with '/' (or any byte) map to one flat file name.
// Gloo's set refuses to overwrite and its get refuses empty values, so set and get read and
// write those files here (same names, written to a temporary file and renamed, so a reader
// never sees half a value); wait and check use Gloo's check with dlpg's deadline; add is
// made atomic among adders by flock on a lock file in the same directory.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/file_store.h>

#include "gloo/errors.h"

namespace dlpg_gloo {
namespace {

class FileStoreImpl : public ::gloo::rendezvous::FileStore {
 public:
  explicit FileStoreImpl(const std::string &path) : FileStore(path) {}

  const std::string &base() const { return basePath_; }
  std::string key_path(const std::string &key) { return objectPath(key); }
  bool exist(const std::vector<std::string> &keys) { return check(keys); }

  // Write value to a temporary file unique to this process and thread, then rename it over
  // the key's file: readers see the old or the new value, never a partial one.
  void put(const std::string &key, const void *value, size_t len) {
    static std::atomic<unsigned> seq{0};
    std::string tmp = tmpPath(key) + "." + std::to_string(getpid()) + "." +
                      std::to_string(seq.fetch_add(1));
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw_errno("cannot create " + tmp);
    const char *p = static_cast<const char *>(value);
    size_t left = len;
    while (left > 0) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int e = errno;
        close(fd);
        unlink(tmp.c_str());
        errno = e;
        throw_errno("cannot write " + tmp);
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
    if (close(fd) != 0) throw_errno("cannot close " + tmp);
    if (rename(tmp.c_str(), key_path(key).c_str()) != 0) {
      int e = errno;
      unlink(tmp.c_str());
      errno = e;
      throw_errno("cannot rename " + tmp);
    }
  }

  // The whole value of an existing key; false when the key does not exist.
  bool read(const std::string &key, std::vector<char> *out) {
    std::string path = key_path(key);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return false;
      throw_errno("cannot open " + path);
    }
    out->clear();
    char buf[65536];
    for (;;) {
      ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int e = errno;
        close(fd);
        errno = e;
        throw_errno("cannot read " + path);
      }
      if (r == 0) break;
      out->insert(out->end(), buf, buf + r);
    }
    close(fd);
    return true;
  }

  [[noreturn]] static void throw_errno(const std::string &what) {
    throw StatusError(DLPG_ERR_SYSTEM, what + ": " + strerror(errno));
  }
};

struct FileStore {
  FileStoreImpl gloo;
  std::string path;
  FileStore(const std::string &p) : gloo(p), path(p) {}
};

FileStore *S(void *impl) { return static_cast<FileStore *>(impl); }

// Poll until every key exists or the deadline passes (Gloo's own wait rounds its timeout
// to whole seconds and cannot name the missing keys).
void wait_keys(FileStore *s, const std::vector<std::string> &keys, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000.0));
  for (;;) {
    if (s->gloo.exist(keys)) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (const auto &k : keys) {
        if (s->gloo.exist({k})) continue;
        if (!missing.empty()) missing += ", ";
        missing += "'" + k + "'";
      }
      char secs[32];
      snprintf(secs, sizeof secs, "%g", timeout_s);
      throw StatusError(DLPG_ERR_TIMEOUT, "file store " + s->path + ": timed out after " +
                                              secs + " s waiting for key(s) " + missing);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Every vtable function catches and reports under its own name.
#define DLPG_FS_TRY try {
#define DLPG_FS_CATCH(name) \
  }                         \
  catch (...) {             \
    return status_from_current_exception("file store " name); \
  }

dlpg_status_t fs_set(void *impl, const char *key, const void *value, size_t len) {
  DLPG_FS_TRY
  S(impl)->gloo.put(key, value, len);
  return DLPG_OK;
  DLPG_FS_CATCH("set")
}

dlpg_status_t fs_get(void *impl, const char *key, double timeout_s, void *buf, size_t cap,
                     size_t *len) {
  DLPG_FS_TRY
  FileStore *s = S(impl);
  std::vector<char> v;
  // A concurrent delete between the wait and the read sends us back to waiting.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    wait_keys(s, {key}, left > 0 ? left : 0.0);
    if (s->gloo.read(key, &v)) break;
  }
  if (len) *len = v.size();
  if (buf && cap && !v.empty()) memcpy(buf, v.data(), v.size() < cap ? v.size() : cap);
  return DLPG_OK;
  DLPG_FS_CATCH("get")
}

// Holds an exclusive flock on BASE/.dlpg-add.lock for the life of the object.
class AddLock {
 public:
  explicit AddLock(const std::string &base) {
    std::string p = base + "/.dlpg-add.lock";
    fd_ = open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) FileStoreImpl::throw_errno("cannot open " + p);
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd_);
      errno = e;
      FileStoreImpl::throw_errno("cannot lock " + p);
    }
  }
  ~AddLock() {
    flock(fd_, LOCK_UN);
    close(fd_);
  }

 private:
  int fd_ = -1;
};

dlpg_status_t fs_add(void *impl, const char *key, int64_t delta, int64_t *result) {
  DLPG_FS_TRY
  FileStore *s = S(impl);
  AddLock lock(s->gloo.base());
  std::vector<char> v;
  int64_t cur = 0;
  if (s->gloo.read(key, &v) && !v.empty()) {
    std::string text(v.begin(), v.end());
    char *end = nullptr;
    errno = 0;
    long long x = strtoll(text.c_str(), &end, 10);
    if (errno || end == text.c_str() || *end != '\0')
      throw StatusError(DLPG_ERR_INVALID_ARGUMENT,
                        std::string("key '") + key + "' holds '" + text.substr(0, 64) +
                            "', not a decimal integer");
    cur = x;
  }
  int64_t next = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
  std::string out = std::to_string(next);
  s->gloo.put(key, out.data(), out.size());
  if (result) *result = next;
  return DLPG_OK;
  DLPG_FS_CATCH("add")
}

dlpg_status_t fs_wait(void *impl, const char *const *keys, size_t nkeys, double timeout_s) {
  DLPG_FS_TRY
  std::vector<std::string> k(keys, keys + nkeys);
  wait_keys(S(impl), k, timeout_s);
  return DLPG_OK;
  DLPG_FS_CATCH("wait")
}

dlpg_status_t fs_check(void *impl, const char *const *keys, size_t nkeys, int *all_exist) {
  DLPG_FS_TRY
  std::vector<std::string> k(keys, keys + nkeys);
  *all_exist = S(impl)->gloo.exist(k) ? 1 : 0;
  return DLPG_OK;
  DLPG_FS_CATCH("check")
}

dlpg_status_t fs_delete_key(void *impl, const char *key, int *deleted) {
  DLPG_FS_TRY
  std::string p = S(impl)->gloo.key_path(key);
  int ok = unlink(p.c_str()) == 0;
  if (!ok && errno != ENOENT) FileStoreImpl::throw_errno("cannot remove " + p);
  if (deleted) *deleted = ok;
  return DLPG_OK;
  DLPG_FS_CATCH("delete_key")
}

int fs_port(void *) { return -1; }

void fs_destroy(void *impl) {
  try {
    delete S(impl);
  } catch (...) {
  }
}

const dlpg__store_vtbl_t kFileStoreVtbl = {
    "file", fs_set, fs_get, fs_add, fs_wait, fs_check, fs_delete_key, fs_port, fs_destroy,
};

// mkdir -p path (the store's directory may not exist yet on the first rank).
void make_dirs(const std::string &path) {
  for (size_t i = 1; i <= path.size(); i++) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        FileStoreImpl::throw_errno("cannot create directory " + part);
    }
  }
}

}  // namespace
}  // namespace dlpg_gloo

namespace dlpg_gloo {
namespace {

// Open the store over the directory path (created when missing).
dlpg_status_t file_store_open(const char *path, double timeout_s, dlpg_store_t **out) {
  FileStore *s = nullptr;
  try {
    make_dirs(path);
    s = new FileStore(path);
  } catch (...) {
    delete s;
    // dlpg_store_open names the URL (and so the path) in front of this message.
    return status_from_current_exception("file store");
  }
  // dlpg__store_new takes ownership of s, also on failure (destroy is called).
  return dlpg__store_new(&kFileStoreVtbl, s, timeout_s, nullptr, out);
}

// "file:///PATH": only local absolute paths (no host part).
dlpg_status_t open_file_url(const char *url, double timeout_s, dlpg_store_t **out) {
  const char *path = url + strlen("file://");
  if (*path != '/')
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "expected file:///ABSOLUTE/PATH (a host part is not supported)");
  if (strcmp(path, "/") == 0) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "the path is empty");
  return file_store_open(path, timeout_s, out);
}

// The store resolves URL schemes through its registry; file:// joins it when the plugin is
// loaded, so plugin/store never includes the Gloo island.
const bool kFileSchemeRegistered =
    dlpg__store_register_scheme("file://", open_file_url) == DLPG_OK;

}  // namespace
}  // namespace dlpg_gloo
