import type { CliCommand, CliOption } from './cli-command.js';

/** Options every command takes. */
export const GLOBAL_OPTIONS: Readonly<Record<string, CliOption>> = {
  config: { type: 'string', value: '<file>', help: 'The MikroORM config. Default: found as the MikroORM CLI finds it.' },
  sagas: {
    type: 'string',
    multiple: true,
    value: '<module>',
    help: 'A module exporting saga definitions (repeatable). Default: package.json "mikro-orm-saga": { "sagas": ... }.',
  },
  json: { type: 'boolean', help: 'Print JSON instead of tables.' },
  yes: { type: 'boolean', help: 'Confirm a command that writes without asking (needed without a terminal).' },
  'log-level': {
    type: 'string',
    value: '<level>',
    help: 'Log lines on stderr at this level and above: debug, info (what a change changed), warn, error. Default warn.',
  },
  help: { type: 'boolean', help: 'Show help.' },
};

const optionLines = (options: Readonly<Record<string, CliOption>>) => {
  const names = Object.entries(options).map(([name, o]) => [`--${name}${o.value ? ` ${o.value}` : ''}`, o.help] as const);
  const width = Math.max(...names.map(([name]) => name.length));
  return names.map(([name, help]) => `  ${name.padEnd(width)}  ${help}`);
};

/** Help for the whole CLI, or for the commands starting with `group` (`sagas`). */
export function commandsHelp(commands: readonly CliCommand[], group?: string): string {
  const shown = commands.filter((c) => group === undefined || c.name.startsWith(`${group} `));
  const width = Math.max(...shown.map((c) => c.name.length + (c.args ? c.args.length + 1 : 0)));
  return [
    `Usage: mikro-orm-saga ${group ?? '<command>'} ${group ? '<command> ' : ''}[options]`,
    '',
    'Commands:',
    ...shown.map((c) => `  ${`${c.name}${c.args ? ` ${c.args}` : ''}`.padEnd(width)}  ${c.summary}`),
    '',
    'Options of every command:',
    ...optionLines(GLOBAL_OPTIONS),
    '',
    'Exit codes: 0 ok, 1 failure, 2 usage error, 3 schema mismatch. Run a command with --help for its options.',
  ].join('\n');
}

/** Help for one command. */
export function commandHelp(command: CliCommand): string {
  const own = Object.keys(command.options).length > 0 ? ['', 'Options:', ...optionLines(command.options)] : [];
  const writes = command.confirm ? ['', 'Writes to the database: asks for confirmation, or pass --yes.'] : [];
  return [
    `Usage: mikro-orm-saga ${command.name}${command.args ? ` ${command.args}` : ''} [options]`,
    '',
    command.summary,
    ...(command.details ? [command.details] : []),
    ...own,
    ...writes,
    '',
    'Options of every command:',
    ...optionLines(GLOBAL_OPTIONS),
  ].join('\n');
}
