import { createInterface } from 'node:readline/promises';
import { parseArgs } from 'node:util';
import { SagaDefinitionError, SagaError } from '../errors.js';
import { SagaOperations } from '../operations/saga-operations.js';
import { isDriverException } from '../orm/index.js';
import type { SagaLogger } from '../telemetry/logger.js';
import { systemClock } from '../time/clock.js';
import type { CliCommand, CliInput, CliOutput } from './cli-command.js';
import { CLI_EXIT_CODES } from './cli-exit-codes.js';
import { commandHelp, commandsHelp, GLOBAL_OPTIONS } from './cli-help.js';
import { cliLogger } from './cli-logger.js';
import { CliUsageError } from './cli-usage-error.js';
import { INBOX_COMMANDS, OUTBOX_COMMANDS, TIMER_COMMANDS } from './commands/dispatch-row-commands.js';
import { MAINTENANCE_COMMANDS } from './commands/maintenance-commands.js';
import { SAGA_COMMANDS } from './commands/saga-commands.js';
import { type LoadedApp, loadApp } from './load-app.js';
import { terminalText } from './terminal-text.js';

/** Every command of the CLI, in help order. */
export const CLI_COMMANDS: readonly CliCommand[] = [
  ...SAGA_COMMANDS,
  ...TIMER_COMMANDS,
  ...OUTBOX_COMMANDS,
  ...INBOX_COMMANDS,
  ...MAINTENANCE_COMMANDS,
];

/** Where the CLI reads and writes: the process's, or a test's. */
export interface CliIo {
  readonly cwd: string;
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** Asks a yes/no question on the terminal; undefined when there is no terminal to ask on. */
  readonly ask: ((question: string) => Promise<string>) | undefined;
}

/** Codes of the operator's own bad input: exit 2, as a bad command line. */
const USAGE_CODES = new Set<string>(['OPTION_INVALID', 'CURSOR_INVALID', 'SAGA_TYPE_UNKNOWN', 'CORRELATION_INVALID']);

/** The command named by the first words of `argv` (options and their values skipped), and the remaining tokens. */
function findCommand(argv: readonly string[]): { command?: CliCommand; group?: string; rest: string[] } {
  const words: number[] = [];
  for (let i = 0; i < argv.length && words.length < 2; i++) {
    const token = argv[i]!;
    if (!token.startsWith('-')) words.push(i);
    else if (!token.includes('=') && GLOBAL_OPTIONS[token.slice(2)]?.type === 'string') i++;
  }
  const [first, second] = words.map((i) => argv[i]!);
  const command =
    CLI_COMMANDS.find((c) => c.name === `${first} ${second}`) ?? CLI_COMMANDS.find((c) => c.name === first && !c.name.includes(' '));
  const used = command ? words.slice(0, command.name.split(' ').length) : [];
  const group = !command && CLI_COMMANDS.some((c) => c.name.startsWith(`${first} `)) ? first : undefined;
  return { command, group, rest: argv.filter((_, i) => !used.includes(i)) };
}

function parse(command: CliCommand, rest: string[], now: Date): CliInput {
  try {
    const { values, positionals } = parseArgs({ args: rest, options: { ...GLOBAL_OPTIONS, ...command.options }, allowPositionals: true });
    return { values: values as CliInput['values'], positionals, now };
  } catch (error) {
    throw new CliUsageError(`${(error as Error).message}. Run mikro-orm-saga ${command.name} --help.`);
  }
}

/** Asks before a write; refuses without a terminal unless `--yes`. */
async function confirmed(command: CliCommand, input: CliInput, io: CliIo): Promise<boolean> {
  if (!command.confirm || input.values.yes === true) return true;
  if (!io.ask) throw new CliUsageError(`${command.name} writes to the database and there is no terminal to confirm on: pass --yes.`);
  const answer = await io.ask(terminalText(`${command.confirm(input)} [y/N] `));
  return /^y(es)?$/i.test(answer.trim());
}

async function execute(command: CliCommand, input: CliInput, io: CliIo, logger: SagaLogger): Promise<CliOutput> {
  const location = { cwd: io.cwd, config: input.values.config as string | undefined, sagas: (input.values.sagas as string[]) ?? [] };
  // Asked before connecting: a declined or unconfirmable write opens nothing.
  if (!(await confirmed(command, input, io))) return { data: { declined: true }, text: 'Declined: nothing was changed.', exitCode: 1 };
  const app = await loadApp({ ...location, log: (line) => io.stderr(terminalText(line)) });
  try {
    return await command.run({ ops: operationsOf(app, logger), em: app.orm.em, sagas: app.sagas }, input);
  } finally {
    await app.orm.close(true);
  }
}

/** The operations on the app; a saga entity the config did not register says why when the two were loaded apart. */
function operationsOf({ orm, sagas, mixedSources }: LoadedApp, logger: SagaLogger): SagaOperations {
  try {
    return new SagaOperations({ em: orm.em, sagas, clock: systemClock, logger });
  } catch (error) {
    if (mixedSources !== undefined && error instanceof SagaDefinitionError) throw new CliUsageError(`${error.message} ${mixedSources}`);
    throw error;
  }
}

/** What went wrong, in words that carry no payload or SQL parameter. */
function failure(error: unknown): { code: string; message: string; exitCode: number } {
  if (error instanceof CliUsageError) return { code: 'USAGE', message: error.message, exitCode: CLI_EXIT_CODES.USAGE };
  if (error instanceof SagaError) {
    const exitCode = USAGE_CODES.has(error.code)
      ? CLI_EXIT_CODES.USAGE
      : error.code === 'SCHEMA_INVALID'
        ? CLI_EXIT_CODES.SCHEMA_MISMATCH
        : CLI_EXIT_CODES.FAILURE;
    return { code: error.code, message: error.message, exitCode };
  }
  if (isDriverException(error)) {
    // A driver message quotes the statement with its parameters: name the failure only.
    return {
      code: 'DATABASE',
      message: `the database refused the command (${error.name}); check the connection and the schema (verify-schema).`,
      exitCode: 1,
    };
  }
  return { code: 'FAILURE', message: error instanceof Error ? error.message : String(error), exitCode: CLI_EXIT_CODES.FAILURE };
}

/**
 * Runs the CLI on `argv` (without `node` and the script) and returns its exit code ({@link CLI_EXIT_CODES}).
 * Output goes to `io.stdout`: a table, or JSON with `--json`; errors to `io.stderr` (and as JSON to stdout with `--json`).
 */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const { command, group, rest } = findCommand(argv);
  const json = argv.includes('--json');
  if (!command) {
    const asked = argv.includes('--help') || argv.includes('-h');
    (asked ? io.stdout : io.stderr)(commandsHelp(CLI_COMMANDS, group));
    if (asked) return CLI_EXIT_CODES.OK;
    const message = `No such command${group ? ` in ${group}` : ''}: run mikro-orm-saga${group ? ` ${group}` : ''} --help for the list.`;
    if (json) io.stdout(JSON.stringify({ error: { code: 'USAGE', message } }, null, 2));
    return CLI_EXIT_CODES.USAGE;
  }
  try {
    const input = parse(command, rest, systemClock.now());
    if (input.values.help === true) {
      io.stdout(commandHelp(command));
      return CLI_EXIT_CODES.OK;
    }
    const logger = cliLogger(input, io.stderr);
    command.validate?.(input);
    const output = await execute(command, input, io, logger);
    // Stored text (errors, correlation values, names) may hold terminal controls: JSON escapes them, text shows them escaped.
    io.stdout(json ? JSON.stringify(output.data, null, 2) : terminalText(output.text));
    return output.exitCode ?? CLI_EXIT_CODES.OK;
  } catch (error) {
    const { code, message, exitCode } = failure(error);
    if (json) io.stdout(JSON.stringify({ error: { code, message } }, null, 2));
    io.stderr(terminalText(`mikro-orm-saga ${command.name}: ${code === 'USAGE' ? '' : `[${code}] `}${message}`));
    return exitCode;
  }
}

/** The process's {@link CliIo}: a prompt only when stdin and stdout are a terminal. */
export function processIo(): CliIo {
  const tty = process.stdin.isTTY === true && process.stdout.isTTY === true;
  return {
    cwd: process.cwd(),
    stdout: (text) => process.stdout.write(`${text}\n`),
    stderr: (text) => process.stderr.write(`${text}\n`),
    ask: tty
      ? async (question) => {
          const prompt = createInterface({ input: process.stdin, output: process.stdout });
          try {
            return await prompt.question(question);
          } finally {
            prompt.close();
          }
        }
      : undefined,
  };
}
