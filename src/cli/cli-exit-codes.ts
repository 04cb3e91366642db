/** Exit codes of the `mikro-orm-saga` CLI. */
export const CLI_EXIT_CODES = {
  /** The command did what was asked. */
  OK: 0,
  /** It failed, found nothing to act on, was declined at the prompt, or changed only some of the rows asked for. */
  FAILURE: 1,
  /** Bad command line: unknown command or option, a missing or malformed argument, a write without `--yes` and no terminal. */
  USAGE: 2,
  /** `verify-schema` found the database different from what the library and the sagas need, or a command failed on it (`SCHEMA_INVALID`). */
  SCHEMA_MISMATCH: 3,
} as const;
/** Exit codes of the `mikro-orm-saga` CLI. */
export type CliExitCode = (typeof CLI_EXIT_CODES)[keyof typeof CLI_EXIT_CODES];
