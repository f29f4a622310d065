#include "dataplane/routing/name_index.h"

#include <gtest/gtest.h>

#include <string>

#include "common/string_hash.h"

namespace kwd::routing {
namespace {

TEST(NameIndexTest, EmptyFindsNothing) {
  NameIndex index;
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.Find(""), -1);
  EXPECT_EQ(index.Find("app1"), -1);
}

TEST(NameIndexTest, FirstInsertWins) {
  NameIndex index;
  EXPECT_TRUE(index.Insert("app1", 7));
  EXPECT_FALSE(index.Insert("app1", 9));
  EXPECT_EQ(index.Find("app1"), 7);
  EXPECT_EQ(index.size(), 1u);
}

TEST(NameIndexTest, FindsEveryNameAcrossGrowthAndNoOther) {
  NameIndex index;
  // Lengths from 0 to ~40 bytes cover every branch of the hash's reads.
  auto name = [](int i) {
    return std::string(static_cast<size_t>(i % 41), 'x') + std::to_string(i);
  };
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(index.Insert(name(i), i));
  }
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(index.Find(name(i)), i) << name(i);
  }
  EXPECT_EQ(index.Find("x"), -1);
  EXPECT_EQ(index.Find(name(5000)), -1);
  EXPECT_EQ(index.Find(name(1) + "y"), -1);
  EXPECT_EQ(index.Find(""), -1);
  EXPECT_TRUE(index.Insert("", -5));  // the empty name is a name like any other
  EXPECT_EQ(index.Find(""), -5);
}

TEST(NameIndexTest, NamesDifferingInOneByteAreDistinct) {
  NameIndex index;
  const std::string base = "host0_ERP_00_abcdefghijklmnopqrstuvwxyz";
  for (size_t i = 0; i < base.size(); ++i) {
    std::string variant = base;
    variant[i] = '#';
    ASSERT_TRUE(index.Insert(variant, static_cast<int>(i)));
  }
  EXPECT_EQ(index.Find(base), -1);
  for (size_t i = 0; i < base.size(); ++i) {
    std::string variant = base;
    variant[i] = '#';
    EXPECT_EQ(index.Find(variant), static_cast<int>(i));
  }
}

TEST(BytesEqualTest, EveryLengthAndEveryDifferingByte) {
  const std::string base = "/sap/bc/gui/sap/its/webgui/abcdefghij";
  for (size_t size = 0; size <= base.size(); ++size) {
    std::string same = base;
    EXPECT_TRUE(BytesEqual(base.data(), same.data(), size)) << size;
    for (size_t i = 0; i < size; ++i) {
      std::string other = base;
      other[i] = '#';
      EXPECT_FALSE(BytesEqual(base.data(), other.data(), size)) << size << " " << i;
    }
  }
}

}  // namespace
}  // namespace kwd::routing
