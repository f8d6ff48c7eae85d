#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "netprof/fd.hpp"

using netprof::Fd;

namespace {
bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }
int new_fd() {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  close(fds[1]);
  return fds[0];
}
}  // namespace

TEST(Fd, ClosesInDestructor) {
  int raw = new_fd();
  {
    Fd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(fd.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, MoveTransfersOwnership) {
  int raw = new_fd();
  Fd a(raw);
  Fd b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  Fd c;
  c = std::move(b);
  EXPECT_FALSE(b);
  EXPECT_TRUE(is_open(raw));
  std::vector<Fd> v;
  v.push_back(std::move(c));
  v.reserve(100);  // relocation moves, never closes
  EXPECT_TRUE(is_open(raw));
  v.clear();
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, ResetReleaseAndSelfMove) {
  int r1 = new_fd(), r2 = new_fd();
  Fd fd(r1);
  fd.reset(r2);
  EXPECT_FALSE(is_open(r1));
  EXPECT_EQ(fd.get(), r2);
  Fd& same = fd;
  fd = std::move(same);
  EXPECT_TRUE(is_open(r2));
  int raw = fd.release();
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(is_open(raw));
  close(raw);
  Fd bad(-1);
  EXPECT_FALSE(bad);  // a failed call's -1 is "no descriptor", closing nothing
}
