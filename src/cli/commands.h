/* commands.h — one function per subcommand; each parses its own argv (argv[0] = command name). */
#ifndef SSB4D_CLI_COMMANDS_H
#define SSB4D_CLI_COMMANDS_H
int cmd_simulate(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_reconstruct(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_fit(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_fit_regions(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_session(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_view(int argc, char **argv);
int cmd_virtual(int argc, char **argv);
int cmd_refine(int argc, char **argv);
#endif
