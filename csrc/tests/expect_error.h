// EXPECT_SHAPEFN_ERROR(statement, kind, fragment): `statement` throws the
// core's one error type, shapefn::Error, of `kind` (error.h), with
// `fragment` in its message. Anything else (no error, another exception, a
// crash) fails the test.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "shapefn/error.h"

#define EXPECT_SHAPEFN_ERROR(statement, error_kind, fragment)                                             \
  do {                                                                                                    \
    try {                                                                                                 \
      statement;                                                                                          \
      ADD_FAILURE() << #statement << " threw nothing";                                                    \
    } catch (const ::shapefn::Error& shapefn_error_) {                                                    \
      EXPECT_STREQ(::shapefn::ErrorKindName(shapefn_error_.kind()), ::shapefn::ErrorKindName(error_kind)) \
          << shapefn_error_.what();                                                                       \
      EXPECT_NE(std::string(shapefn_error_.what()).find(fragment), std::string::npos)                     \
          << "expected '" << (fragment) << "' in the message: " << shapefn_error_.what();                 \
    } catch (const std::exception& other_) {                                                              \
      ADD_FAILURE() << #statement << " threw another exception than shapefn::Error: " << other_.what();   \
    }                                                                                                     \
  } while (0)
