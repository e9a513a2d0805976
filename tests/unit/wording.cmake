# dlpg's own sentences (the conformance suite checks only statuses and the ranks, arguments
# and values a message names): run against the built plugin through the conformance
# harness; the store's raw-socket helpers compute HMACs with libcrypto.
dlpg_add_gtest(test_wording SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wording.cc
  LIBS dlpg_conformance_harness OpenSSL::Crypto)
