/* The echoflow command's subcommands. */
#ifndef EF_CLI_H
#define EF_CLI_H

int cmd_train(int argc, char **argv);
int cmd_pack(int argc, char **argv);

#endif
