build2/obj/core/error.o: core/error.c core/error.h
core/error.h:
