import type { SagaChange, SagaDetail, SagaStatus, SagaSummary } from '../../operations/operation-types.js';
import { entityMetadata } from '../../orm/index.js';
import {
  type CliCommand,
  type CliContext,
  type CliInput,
  DEFAULT_CLI_LIMIT,
  instant,
  integer,
  PAGE_OPTIONS,
  positionals,
  text,
  withNextPage,
} from '../cli-command.js';
import { formatFields, formatTable } from '../format-table.js';
import { outboxTable, timerTable } from './dispatch-row-commands.js';

const sagaTable = (sagas: readonly SagaSummary[]) =>
  formatTable(
    ['type', 'id', 'correlation', 'step', 'version', 'created', 'completed'],
    sagas.map((s) => [s.sagaType, s.id, s.correlation, s.step, s.version, s.createdAt, s.completedAt]),
  );

/**
 * A correlation value from the command line as the saga's correlation property holds it: a number for a
 * numeric column (`--correlation 42`), the text otherwise. The API checks it as it checks a message's value.
 */
function correlationOf({ em, sagas }: CliContext, sagaType: string | undefined, raw: string | undefined): unknown {
  const saga = sagas.find((s) => s.name === sagaType);
  if (raw === undefined || !saga) return raw;
  const property = entityMetadata(em, saga.state)?.properties[saga.correlationProperty as never];
  return property?.runtimeType === 'number' && raw.trim() !== '' && Number.isFinite(Number(raw)) ? Number(raw) : raw;
}

const list: CliCommand = {
  name: 'sagas list',
  summary: 'Sagas, newest first, filtered in SQL.',
  options: {
    type: { type: 'string', value: '<saga type>', help: 'One saga type. Default: every registered type.' },
    status: { type: 'string', value: '<status>', help: 'active, completed or all. Default all.' },
    correlation: { type: 'string', value: '<value>', help: "The correlation property's value (needs --type)." },
    step: { type: 'string', value: '<step>', help: "The stepProperty's value (needs --type)." },
    'created-after': { type: 'string', value: '<date|age>', help: 'Created at or after (ISO 8601, or an age: 7d).' },
    'created-before': { type: 'string', value: '<date|age>', help: 'Created before (ISO 8601, or an age: 2h = older than 2 hours).' },
    ...PAGE_OPTIONS,
  },
  async run(context, input) {
    const page = await context.ops.listSagas({
      sagaType: text(input, 'type'),
      status: text(input, 'status') as SagaStatus | undefined,
      correlation: correlationOf(context, text(input, 'type'), text(input, 'correlation')),
      step: text(input, 'step'),
      createdAfter: instant(input, 'created-after'),
      createdBefore: instant(input, 'created-before'),
      limit: integer(input, 'limit', DEFAULT_CLI_LIMIT)!,
      cursor: text(input, 'cursor'),
    });
    return { data: page, text: withNextPage(sagaTable(page.items), page.nextCursor) };
  },
};

const ONE_SAGA = { oneSaga: true };

function detailText(saga: SagaDetail): string {
  const { state, pendingTimers, recentTimers, outbox, messageIds, ...summary } = saga;
  return [
    formatFields(summary),
    `\nstate:\n${formatFields(state)}`,
    `\npending timers:\n${timerTable(pendingTimers, ONE_SAGA)}`,
    `\nrecent timers:\n${timerTable(recentTimers, ONE_SAGA)}`,
    `\noutbox:\n${outboxTable(outbox, ONE_SAGA)}`,
    `\nhandled message ids:\n${formatTable(
      ['message id', 'version', 'processed'],
      messageIds.map((m) => [m.messageId, m.version, m.processedAt]),
    )}`,
  ].join('\n');
}

const show: CliCommand = {
  name: 'sagas show',
  args: '<type> [<id>]',
  summary: 'One saga: its state, pending and recent timers, outbox rows and handled message ids.',
  details: 'Give the id, or --correlation instead. Exits 1 when there is no such saga.',
  options: {
    correlation: { type: 'string', value: '<value>', help: "Find it by its correlation property's value instead of its id." },
    recent: { type: 'string', value: '<n>', help: 'Most rows per list. Default 20.' },
  },
  async run(context, input) {
    const raw = text(input, 'correlation');
    const [sagaType, sagaId] = raw === undefined ? positionals(input, 'type', 'id') : positionals(input, 'type');
    const correlation = correlationOf(context, sagaType, raw);
    const saga = await context.ops.getSaga({ sagaType: sagaType!, sagaId, correlation, recent: integer(input, 'recent') });
    if (!saga) return { data: null, text: `No ${sagaType} saga ${sagaId ?? 'with that correlation value'}.`, exitCode: 1 };
    return { data: saga, text: detailText(saga) };
  },
};

const count: CliCommand = {
  name: 'sagas count',
  summary: 'Active sagas per registered type.',
  options: {},
  async run({ ops }) {
    const counts = await ops.countActiveSagas();
    return {
      data: counts,
      text: formatTable(
        ['type', 'active'],
        counts.map((c) => [c.sagaType, c.active]),
      ),
    };
  },
};

const CHANGE_OPTIONS = {
  reason: { type: 'string', value: '<text>', help: 'Why, for the audit message (required, 1 to 500 characters).' },
  'expected-version': { type: 'string', value: '<n>', help: 'Refuse the change when the saga is no longer at this version.' },
} as const;

function changeRequest(input: CliInput) {
  const [sagaType, sagaId] = positionals(input, 'type', 'id');
  return { sagaType: sagaType!, sagaId: sagaId!, reason: text(input, 'reason') ?? '', expectedVersion: integer(input, 'expected-version') };
}

const changeText = (verb: string, change: SagaChange) =>
  `${verb} ${change.sagaType} ${change.sagaId}: version ${change.version}, ${change.timersCancelled} pending timer(s) deleted, audit message ${change.auditMessageId}`;

const forceComplete: CliCommand = {
  name: 'sagas force-complete',
  args: '<type> <id>',
  summary: 'Complete an active saga now: deletes its pending timers, writes a SagaForceCompleted audit message.',
  details: 'One transaction, guarded by the saga version. Exits 1 when the saga is not found, completed, or moved on.',
  options: CHANGE_OPTIONS,
  confirm: (input) => `Force-complete ${input.positionals.join(' ')} and delete its pending timers?`,
  async run({ ops }, input) {
    const change = await ops.forceComplete(changeRequest(input));
    return { data: change, text: changeText('completed', change) };
  },
};

const reopen: CliCommand = {
  name: 'sagas reopen',
  args: '<type> <id>',
  summary: 'Reopen a completed saga; writes a SagaReopened audit message. Timers are not restored.',
  details: 'One transaction, guarded by the saga version. Exits 1 when the saga is not found, active, or moved on.',
  options: CHANGE_OPTIONS,
  confirm: (input) => `Reopen ${input.positionals.join(' ')}?`,
  async run({ ops }, input) {
    const change = await ops.reopen(changeRequest(input));
    return { data: change, text: changeText('reopened', change) };
  },
};

/** The `sagas ...` commands. */
export const SAGA_COMMANDS: readonly CliCommand[] = [list, show, count, forceComplete, reopen];
