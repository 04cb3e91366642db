import { isLogLevel, LOG_LEVELS, levelLogger, type SagaLogger } from '../telemetry/logger.js';
import type { CliInput } from './cli-command.js';
import { CliUsageError } from './cli-usage-error.js';
import { terminalText } from './terminal-text.js';

/** The level the CLI logs at without `--log-level`. */
export const DEFAULT_CLI_LOG_LEVEL = 'warn';

/**
 * The CLI's logger: lines `[mikro-orm-saga] <level>: <message> <fields as JSON>` on stderr (stdout carries the
 * command's output), at `--log-level` and above.
 * @throws CliUsageError for a level that is not one of `debug`, `info`, `warn`, `error`.
 */
export function cliLogger(input: CliInput, stderr: (text: string) => void): SagaLogger {
  const level = input.values['log-level'] ?? DEFAULT_CLI_LOG_LEVEL;
  if (!isLogLevel(level)) throw new CliUsageError(`--log-level takes one of ${LOG_LEVELS.join(', ')}.`);
  return levelLogger(level, (at, message, fields) =>
    stderr(terminalText(`[mikro-orm-saga] ${at}: ${message}${fields ? ` ${JSON.stringify(fields)}` : ''}`)),
  );
}
