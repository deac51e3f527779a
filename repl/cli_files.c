/* cli_files.c - `lumen compare` and `lumen inspect` (filled in by the files issue). */
#include <stdio.h>
#include <string.h>

/* Runs a files subcommand if argv[1] names one: returns its exit status, or
 * -1 when argv[1] is not a files subcommand. */
int lm_cli_files(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return -1;
}
