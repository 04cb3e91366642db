/** A command line the CLI cannot run (exit code 2). The message says what to type instead. */
export class CliUsageError extends Error {
  override readonly name = 'CliUsageError';
}
