// White-box tests of plugin/base: a table of parameters declared by an owner other than core
// (registered, read by pointer, cached or not, printed), and log subsystems registered by
// name after DLPG_DEBUG_SUBSYS was read. The ctest sets the environment (base.cmake).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "base/log.h"
#include "base/params.h"
}

namespace {

const dlpg__param_decl_t kTable[] = {
    {"DLPG_TEST_CACHED", "dflt", DLPG__PARAM_CACHED, "read once"},
    {"DLPG_TEST_FRESH", "dflt", 0, "read at each use"},
    {"DLPG_TEST_SECRET", nullptr, DLPG__PARAM_CACHED | DLPG__PARAM_SECRET, "never printed"},
    {"DLPG_TEST_LONG", "5", DLPG__PARAM_CACHED, "an integer"},
};

std::string Printed() {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  dlpg__params_print(f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

TEST(BaseParams, OwnerTableRegisteredReadByPointerAndPrinted) {
  ASSERT_EQ(dlpg__params_register("test", kTable, 4), 0);
  EXPECT_EQ(dlpg__params_register("test", kTable, 4), 0);  // the same table again: no-op
  // Another owner may not declare a variable core declares.
  const dlpg__param_decl_t clash[] = {{"DLPG_TIMEOUT", "1", 0, "core's"}};
  EXPECT_EQ(dlpg__params_register("thief", clash, 1), -1);

  EXPECT_STREQ(dlpg__param_get(&kTable[0]), "first");
  EXPECT_STREQ(dlpg__param_get(&kTable[1]), "dflt");
  long v = 0;
  EXPECT_EQ(dlpg__param_get_long(&kTable[3], &v), 0);  // "12x": unparsable, warned, ignored
  // Cached: a later setenv is not seen; not cached: it is.
  setenv("DLPG_TEST_CACHED", "second", 1);
  setenv("DLPG_TEST_FRESH", "now", 1);
  EXPECT_STREQ(dlpg__param_get(&kTable[0]), "first");
  EXPECT_STREQ(dlpg__param_get(&kTable[1]), "now");
  // set_default_env sets an unset variable only.
  EXPECT_EQ(dlpg__param_set_default_env(&kTable[1], "other"), 0);
  unsetenv("DLPG_TEST_FRESH");
  EXPECT_EQ(dlpg__param_set_default_env(&kTable[1], "other"), 1);
  EXPECT_STREQ(dlpg__param_get(&kTable[1]), "other");

  std::string p = Printed();
  EXPECT_NE(p.find("  core:\n"), std::string::npos) << p;
  EXPECT_NE(p.find("DLPG_TIMEOUT"), std::string::npos) << p;
  EXPECT_NE(p.find("  gloo:\n"), std::string::npos) << p;  // Gloo registers its own at load
  EXPECT_NE(p.find("DLPG_GLOO_IFACE"), std::string::npos) << p;
  EXPECT_NE(p.find("  test:\n"), std::string::npos) << p;
  EXPECT_NE(p.find("DLPG_TEST_SECRET"), std::string::npos) << p;
  EXPECT_EQ(p.find("hunter2"), std::string::npos) << p;
  EXPECT_EQ(p.find("thief"), std::string::npos) << p;
}

TEST(BaseLog, SubsystemsRegisteredAfterTheFirstLineAreSelectedByName) {
  // DLPG_DEBUG_SUBSYS=late_sub,STORE, read at the first check, before late_sub exists.
  EXPECT_TRUE(dlpg__log_enabled(DLPG__LOG_INFO, DLPG__SUB_STORE));
  EXPECT_FALSE(dlpg__log_enabled(DLPG__LOG_INFO, DLPG__SUB_INIT));
  EXPECT_FALSE(dlpg__log_enabled(DLPG__LOG_TRACE, DLPG__SUB_STORE));
  dlpg__log_subsys_t gloo = dlpg__log_subsys_register("GLOO");  // Gloo's, registered at load
  EXPECT_GT(gloo, DLPG__SUB_P2P);
  EXPECT_FALSE(dlpg__log_enabled(DLPG__LOG_INFO, gloo));
  dlpg__log_subsys_t late = dlpg__log_subsys_register("LATE_SUB");
  ASSERT_GT(late, 0);
  EXPECT_NE(late, gloo);
  EXPECT_EQ(dlpg__log_subsys_register("late_sub"), late);  // names match without case
  EXPECT_STREQ(dlpg__log_subsys_name(late), "LATE_SUB");
  EXPECT_TRUE(dlpg__log_enabled(DLPG__LOG_INFO, late));
  EXPECT_FALSE(dlpg__log_enabled(DLPG__LOG_INFO, dlpg__log_subsys_register("OTHER")));
  EXPECT_EQ(dlpg__log_subsys_register(""), 0);
  EXPECT_EQ(dlpg__log_subsys_register("no spaces"), 0);
  EXPECT_EQ(dlpg__log_subsys_register("A_NAME_TOO_LONG_X"), 0);
  EXPECT_STREQ(dlpg__log_subsys_name(DLPG__SUB_INIT), "INIT");
}

}  // namespace
