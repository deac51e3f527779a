# tests/samples/module.mk - the image samples (samples/*.lua) run small on the
# CPU and on Vulkan, their pictures checked (tests/samples/run.sh).
TEST_SCRIPTS += tests/samples/run.sh
