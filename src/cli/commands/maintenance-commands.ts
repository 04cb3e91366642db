import { adviseSagaSchema, describeAdvice, type SchemaAdvice } from '../../schema/advise-saga-schema.js';
import { inspectSagaSchema, likelyCauses, SCHEMA_FIX } from '../../schema/verify-saga-schema.js';
import { type CliCommand, type CliInput, instant, integer } from '../cli-command.js';
import { CLI_EXIT_CODES } from '../cli-exit-codes.js';
import { CliUsageError } from '../cli-usage-error.js';
import { formatFields, formatTable } from '../format-table.js';

function purgeOptions(input: CliInput) {
  return {
    dispatchedBefore: instant(input, 'dispatched-before'),
    includeDeadLettered: input.values['include-dead-lettered'] === true,
    completedSagasBefore: instant(input, 'completed-sagas-before'),
    expiredMessageIds: input.values['expired-message-ids'] === true,
    batchSize: integer(input, 'batch-size'),
    maxBatches: integer(input, 'max-batches'),
  };
}

/** The parts of a purge: without one, it has nothing to do. */
const PURGE_PARTS = ['dispatched-before', 'completed-sagas-before', 'expired-message-ids'];

const purge: CliCommand = {
  name: 'purge',
  summary: 'Delete what retention allows, in bounded batches; safe from several processes at once.',
  details: 'Give at least one of --dispatched-before, --completed-sagas-before, --expired-message-ids.',
  options: {
    'dispatched-before': {
      type: 'string',
      value: '<date|age>',
      help: 'Timers, outbox rows and staged deliveries that left the pending set before this (ISO 8601, or an age: 30d). Dead-lettered rows are kept.',
    },
    'include-dead-lettered': { type: 'boolean', help: 'With --dispatched-before: dead-lettered rows too.' },
    'completed-sagas-before': {
      type: 'string',
      value: '<date|age>',
      help: 'Sagas completed before this, with their timers, dispatched outbox rows and message ids.',
    },
    'expired-message-ids': { type: 'boolean', help: "Handled message ids older than the runtime's retention (7 days)." },
    'batch-size': { type: 'string', value: '<n>', help: 'Rows per statement (one short transaction each). Default 1000.' },
    'max-batches': { type: 'string', value: '<n>', help: 'Most batches per part. Default: until nothing is left.' },
  },
  validate(input) {
    if (PURGE_PARTS.every((part) => input.values[part] === undefined)) {
      throw new CliUsageError(`purge has nothing to do: give ${PURGE_PARTS.map((p) => `--${p}`).join(', ')} (or several).`);
    }
  },
  confirm: () => 'Purge? Deleted rows cannot be restored.',
  async run({ ops }, input) {
    const report = await ops.purge(purgeOptions(input));
    const sagas = Object.entries(report.sagas).map(([type, n]) => `${type} ${n}`);
    const fields = {
      timers: report.timers,
      outbox: report.outbox,
      inbox: report.inbox,
      sagas: sagas.join(', ') || 0,
      'message ids': report.messageIds,
    };
    return { data: report, text: `deleted in ${report.batches} batch(es):\n${formatFields(fields)}` };
  },
};

const verifySchema: CliCommand = {
  name: 'verify-schema',
  summary: "Compare the database with what the library's tables and the sagas' tables need.",
  details:
    'Exits 3 when anything is missing or different, naming every item, its likely cause and the command that fixes it. ' +
    'Recommended settings that are not set (PostgreSQL autovacuum settings) are advice: the schema still fits.',
  options: {},
  async run({ em, sagas }) {
    const problems = await inspectSagaSchema({ em, sagas });
    const advice = await adviseSagaSchema({ em });
    const advised = advice.length > 0 ? `\n${formatAdvice(advice)}\n${describeAdvice(advice)}.` : '';
    if (problems.length === 0) {
      const fits = 'The schema fits mikro-orm-saga and the registered sagas';
      return { data: { ok: true, problems, advice }, text: advice.length > 0 ? `${fits}, with advice:${advised}` : `${fits}.` };
    }
    const causes = likelyCauses(problems);
    const table = formatTable(
      ['problem', 'table', 'item', 'expected', 'actual'],
      problems.map((p) => [p.kind, p.table, p.item, p.expected, p.actual]),
    );
    const because = causes.map((cause) => `\nLikely cause: ${cause}.`).join('');
    return {
      data: { ok: false, problems, causes, fix: SCHEMA_FIX, advice },
      text: `${table}${because}\nTo fix it, ${SCHEMA_FIX}.${advice.length > 0 ? `\nAdvice:${advised}` : ''}`,
      exitCode: CLI_EXIT_CODES.SCHEMA_MISMATCH,
    };
  },
};

/** Advice as a table: one row per setting that is not set. */
function formatAdvice(advice: readonly SchemaAdvice[]): string {
  return formatTable(
    ['table', 'setting', 'recommended'],
    advice.map((a) => [a.table, a.setting, a.recommended]),
  );
}

/** `purge` and `verify-schema`. */
export const MAINTENANCE_COMMANDS: readonly CliCommand[] = [purge, verifySchema];
