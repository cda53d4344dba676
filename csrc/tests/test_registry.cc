// The shape-function registry (shapefn/registry.h): registration, lookup,
// aliases, masks, levels, and the errors it raises.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "shapefn/registry.h"

namespace shapefn {
namespace {

void NoShape(const ShapeFuncInput*, int, const ShapeFuncAttrs&, ShapeVec* outputs) { outputs[0].clear(); }

ShapeFuncEntry Entry(const std::string& name, std::vector<bool> mask, int level = 10, int arity = -1) {
  ShapeFuncEntry e;
  e.name = name;
  e.mask = std::move(mask);
  e.level = level;
  e.arity = arity;
  return e;
}

ErrorKind KindOfFailure(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no shapefn::Error was thrown";
  return ErrorKind::kRuntime;
}

TEST(Registry, RegisterAndLookUp) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ShapeFuncEntry e = Entry("test.cpp.registry.slice", {false, true, true}, 10, 3);
  e.native = NoShape;
  e.num_outputs = 1;
  ASSERT_TRUE(r.Register(e, false));
  ASSERT_TRUE(r.Contains("test.cpp.registry.slice"));
  ShapeFuncEntryPtr got = r.Lookup("test.cpp.registry.slice");
  EXPECT_EQ(got->name, "test.cpp.registry.slice");
  EXPECT_EQ(got->mask, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(got->arity, 3);
  EXPECT_EQ(got->native, &NoShape);
  EXPECT_FALSE(got->NeedsValue(0));
  EXPECT_TRUE(got->NeedsValue(1));
  EXPECT_TRUE(got->AnyValue());
  std::vector<std::string> names = r.Names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "test.cpp.registry.slice"), names.end());
}

TEST(Registry, OneFlagAppliesToEveryInputOfUnknownArity) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.variadic", {true}), false));
  ShapeFuncEntryPtr got = r.Lookup("test.cpp.registry.variadic");
  EXPECT_TRUE(got->NeedsValue(0));
  EXPECT_TRUE(got->NeedsValue(5));
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.shapes_only", {false}), false));
  EXPECT_FALSE(r.Lookup("test.cpp.registry.shapes_only")->AnyValue());
}

TEST(Registry, UnknownOpIsAKeyError) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  EXPECT_FALSE(r.Contains("test.cpp.registry.never_registered"));
  try {
    r.Lookup("test.cpp.registry.never_registered");
    FAIL() << "Lookup of an unknown op returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kKey);
    EXPECT_NE(std::string(e.what()).find("'test.cpp.registry.never_registered'"), std::string::npos);
  }
}

TEST(Registry, DuplicateRegistrationAtTheSameLevelFails) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.dup", {false, true}, 10, 2), false));
  try {
    r.Register(Entry("test.cpp.registry.dup", {true, true}, 10, 2), false);
    FAIL() << "a second registration at the same level took effect";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("already registered at level 10"), std::string::npos);
  }
  EXPECT_EQ(r.Lookup("test.cpp.registry.dup")->mask, (std::vector<bool>{false, true}));
  // override replaces at an equal level.
  EXPECT_TRUE(r.Register(Entry("test.cpp.registry.dup", {true, true}, 10, 2), true));
  EXPECT_EQ(r.Lookup("test.cpp.registry.dup")->mask, (std::vector<bool>{true, true}));
}

TEST(Registry, HigherLevelWinsLowerLevelIsIgnored) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.levels", {false, false}, 10, 2), false));
  EXPECT_FALSE(r.Register(Entry("test.cpp.registry.levels", {true, true}, 5, 2), false));
  EXPECT_EQ(r.Lookup("test.cpp.registry.levels")->mask, (std::vector<bool>{false, false}));
  EXPECT_TRUE(r.Register(Entry("test.cpp.registry.levels", {false, true}, 20, 2), false));
  EXPECT_EQ(r.Lookup("test.cpp.registry.levels")->mask, (std::vector<bool>{false, true}));
  EXPECT_EQ(r.Lookup("test.cpp.registry.levels")->level, 20);
}

TEST(Registry, MaskMustMatchTheArity) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  EXPECT_EQ(KindOfFailure([&] {
              r.Register(Entry("test.cpp.registry.arity", {true, false, true}, 10, 2), false);
            }),
            ErrorKind::kValue);
  EXPECT_FALSE(r.Contains("test.cpp.registry.arity"));
  // A new mask for a registered op: its arity stands, one flag is spread over it.
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.arity", {false, true}, 10, 2), false));
  EXPECT_EQ(KindOfFailure([&] {
              r.Register(Entry("test.cpp.registry.arity", {true, true, true}, 20), false);
            }),
            ErrorKind::kValue);
  EXPECT_TRUE(r.Register(Entry("test.cpp.registry.arity", {true}, 20), false));
  EXPECT_EQ(r.Lookup("test.cpp.registry.arity")->mask, (std::vector<bool>{true, true}));
}

TEST(Registry, EmptyNameOrMaskFails) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  EXPECT_EQ(KindOfFailure([&] { r.Register(Entry("", {true}), false); }), ErrorKind::kValue);
  EXPECT_EQ(KindOfFailure([&] { r.Register(Entry("test.cpp.registry.empty_mask", {}), false); }), ErrorKind::kValue);
}

TEST(Registry, NewMaskKeepsTheShapeFunction) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ShapeFuncEntry e = Entry("test.cpp.registry.remask", {true, true}, 10, 2);
  e.native = NoShape;
  ASSERT_TRUE(r.Register(e, false));
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.remask", {false, true}, 30), false));
  ShapeFuncEntryPtr got = r.Lookup("test.cpp.registry.remask");
  EXPECT_EQ(got->native, &NoShape);
  EXPECT_EQ(got->mask, (std::vector<bool>{false, true}));
}

TEST(Registry, AliasesNameTheSameEntry) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.canonical", {false, true}, 10, 2), false));
  r.AddAlias("test.cpp.registry.alias", "test.cpp.registry.canonical");
  EXPECT_EQ(r.Canonical("test.cpp.registry.alias"), "test.cpp.registry.canonical");
  EXPECT_EQ(r.Lookup("test.cpp.registry.alias"), r.Lookup("test.cpp.registry.canonical"));
  // Registering under the alias replaces the canonical entry.
  ASSERT_TRUE(r.Register(Entry("test.cpp.registry.alias", {true, true}, 20), false));
  EXPECT_EQ(r.Lookup("test.cpp.registry.canonical")->mask, (std::vector<bool>{true, true}));
  EXPECT_EQ(r.Lookup("test.cpp.registry.canonical")->name, "test.cpp.registry.canonical");
}

TEST(Registry, BuiltinsAreRegisteredWithTheirMasksAndAliases) {
  ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  ShapeFuncEntryPtr slice = r.Lookup("dyn.strided_slice");
  EXPECT_EQ(slice->name, "relax.dynamic_strided_slice");
  EXPECT_EQ(slice->mask, (std::vector<bool>{false, true, true, true}));
  EXPECT_NE(slice->native, nullptr);
  EXPECT_EQ(r.Lookup("relax.topk")->num_outputs, 2);
  EXPECT_EQ(r.Lookup("dyn.reshape")->mask, (std::vector<bool>{false, true}));
  EXPECT_TRUE(r.Lookup("relax.nonzero")->count_sized);
}

TEST(Registry, ResolveMaskSpreadsOneFlagAndNamesTheOpTheMaskAndTheLengths) {
  const ShapeFuncRegistry& r = ShapeFuncRegistry::Global();
  EXPECT_EQ(r.ResolveMask("test.cpp.registry.unknown", {true}, 3), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(r.ResolveMask("test.cpp.registry.unknown", {true}, -1), (std::vector<bool>{true}));
  // The registered arity counts too, under an alias as under the name.
  EXPECT_EQ(r.ResolveMask("dyn.strided_slice", {false}, -1), (std::vector<bool>(4, false)));
  try {
    r.ResolveMask("dyn.strided_slice", {false, true}, -1);
    ADD_FAILURE() << "no shapefn::Error was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_STREQ(e.what(),
                 "register_shape_func: 'relax.dynamic_strided_slice' takes 4 inputs but the mask [False, True] has 2");
  }
  EXPECT_EQ(KindOfFailure([&] { r.ResolveMask("test.cpp.registry.unknown", {}, -1); }), ErrorKind::kValue);
}

}  // namespace
}  // namespace shapefn
