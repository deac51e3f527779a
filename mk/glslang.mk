# mk/glslang.mk - glslang 15 for the shaders that need GL_KHR_cooperative_matrix
# (Debian 12's glslc 2023.2 and glslang 12 reject it at #extension).
#
# mk/glslang.sh builds it once from Debian 13's source package into
# $(GLSLANG_TOOLS) (bin/glslang-VERSION, include/vulkan from vulkan-loader's
# source), kept per version: flag changes, BUILD=build/san and `make clean`
# (which keeps build/tools) do not rebuild it.  It writes
# $(GLSLANG_TOOLS)/glslang.mk with GLSLANG15 (the compiler, or empty) and
# GLSLANG15_WHY; make remakes that file on every run (one test of a stamp
# when built) and rereads it when it changes.  Where glslang 15 cannot be
# had (no archive reachable, no cmake), the KHR kernels are left out and
# make says why (mk/glslang.sh when it fails, the SPIR-V pack step after);
# the NV and plain kernels are built as before.  LUMEN_GLSLANG=/path names
# an installed glslang 15 or later instead.
GLSLANG_TOOLS ?= build/tools
LUMEN_GLSLANG ?=

ifeq ($(VK_ENABLED),yes)
-include $(GLSLANG_TOOLS)/glslang.mk
$(GLSLANG_TOOLS)/glslang.mk: FORCE
	@LUMEN_GLSLANG="$(LUMEN_GLSLANG)" sh mk/glslang.sh $(GLSLANG_TOOLS)
endif
