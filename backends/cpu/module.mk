# backends/cpu/module.mk - the CPU backend's per-file flags: each vmath
# table is compiled for its own instruction set (the rest of the library
# stays baseline x86-64), and SLEEF is linked.
VMATH_FLAGS_sse2   := -msse2
VMATH_FLAGS_avx2   := -mavx2 -mfma -mf16c
VMATH_FLAGS_avx512 := -mavx512f -mavx2 -mfma -mf16c
$(BUILD)/obj/backends/cpu/vmath_sse2.o: CFLAGS += $(VMATH_FLAGS_sse2)
$(BUILD)/obj/backends/cpu/vmath_avx2.o: CFLAGS += $(VMATH_FLAGS_avx2)
$(BUILD)/obj/backends/cpu/vmath_avx512.o: CFLAGS += $(VMATH_FLAGS_avx512)
$(BUILD)/fuzz/obj/backends/cpu/vmath_avx2.o: FUZZ_CFLAGS += $(VMATH_FLAGS_avx2)
$(BUILD)/obj/backends/cpu/quant_dot_avx2.o: CFLAGS += $(VMATH_FLAGS_avx2)
$(BUILD)/fuzz/obj/backends/cpu/quant_dot_avx2.o: FUZZ_CFLAGS += $(VMATH_FLAGS_avx2)
$(BUILD)/fuzz/obj/backends/cpu/vmath_avx512.o: FUZZ_CFLAGS += $(VMATH_FLAGS_avx512)
LIB_EXTRA += -lsleef
TEST_SCRIPTS += tests/cpu_isa.sh
