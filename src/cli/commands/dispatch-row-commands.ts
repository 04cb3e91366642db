import {
  type BulkResult,
  DISPATCH_ROW_STATUSES,
  type DispatchRowFields,
  type DispatchRowQuery,
  type DispatchRowStatus,
  type InboxRow,
  type OutboxRow,
  type TimerRow,
} from '../../operations/operation-types.js';
import { APP_MESSAGE_SAGA_TYPE } from '../../saga/staging/stage-message.js';
import {
  type CliCommand,
  type CliInput,
  DEFAULT_CLI_LIMIT,
  dueInstant,
  ids,
  integer,
  PAGE_OPTIONS,
  text,
  withNextPage,
} from '../cli-command.js';
import { CLI_EXIT_CODES } from '../cli-exit-codes.js';
import { CliUsageError } from '../cli-usage-error.js';
import { formatTable } from '../format-table.js';

/** Rows still waiting to be delivered: their `availableAt` is when they are next tried. */
const inPendingSet = (row: DispatchRowFields) =>
  row.status === DISPATCH_ROW_STATUSES.PENDING || row.status === DISPATCH_ROW_STATUSES.LEASED;

/**
 * Why a row failed: a dead-lettered row's reason (else its last error), a pending row's last delivery error (it
 * is retried, or was requeued). A row delivered or retired otherwise shows none: its old error is history (`--json` keeps it).
 */
const whyFailed = (row: DispatchRowFields) =>
  row.status === DISPATCH_ROW_STATUSES.DEAD_LETTERED ? (row.deadLetterReason ?? row.lastError) : inPendingSet(row) ? row.lastError : null;

/** When a timer fires next: a timer in the pending set when it is next tried (after a backoff or a requeue), else when it was due. */
const nextDue = (timer: TimerRow) => (inPendingSet(timer) ? timer.availableAt : timer.dueAt);

/** How a table of rows is shown. */
interface RowTableOptions {
  /** Leave out the saga type and id columns, for rows that are all one saga's (`sagas show`). Default false. */
  readonly oneSaga?: boolean;
}

const sagaHeaders = ({ oneSaga }: RowTableOptions) => (oneSaga ? [] : ['saga type', 'saga id']);
/** A row's saga type as shown: a message the application staged itself has the saga type '' (`APP_MESSAGE_SAGA_TYPE`). */
const shownSagaType = (sagaType: string) => (sagaType === APP_MESSAGE_SAGA_TYPE ? '(app)' : sagaType);
const sagaColumns = ({ oneSaga }: RowTableOptions, row: DispatchRowFields & { readonly sagaId: string }) =>
  oneSaga ? [] : [shownSagaType(row.sagaType), row.sagaId];

/** Timers as a table; the last column is why the row failed, unabridged. */
export const timerTable = (rows: readonly TimerRow[], options: RowTableOptions = {}) =>
  formatTable(
    ['id', 'status', ...sagaHeaders(options), 'name', 'message', 'due', 'attempts', 'error'],
    rows.map((t) => [t.id, t.status, ...sagaColumns(options, t), t.name, t.messageType, nextDue(t), t.attempts, whyFailed(t)]),
  );

/** Outbox rows as a table; the last column is why the row failed, unabridged. */
export const outboxTable = (rows: readonly OutboxRow[], options: RowTableOptions = {}) =>
  formatTable(
    ['id', 'status', ...sagaHeaders(options), 'message', 'created', 'attempts', 'error'],
    rows.map((o) => [o.id, o.status, ...sagaColumns(options, o), o.messageType, o.createdAt, o.attempts, whyFailed(o)]),
  );

/** Staged deliveries as a table; the last column is why the row failed, unabridged. */
export const inboxTable = (rows: readonly InboxRow[]) =>
  formatTable(
    ['id', 'status', 'saga type', 'saga key', 'message', 'due', 'attempts', 'error'],
    rows.map((r) => [r.id, r.status, r.sagaType, r.sagaKey, r.messageType, r.availableAt, r.attempts, whyFailed(r)]),
  );

const COMMON_FILTERS = {
  type: { type: 'string', value: '<saga type>', help: 'Rows of one saga type.' },
  'message-type': { type: 'string', value: '<type>', help: 'Rows carrying one message type.' },
  ...PAGE_OPTIONS,
} as const;

const ROW_FILTERS = {
  status: {
    type: 'string',
    value: '<status>',
    help: 'pending, leased, dead_lettered, missed, fired, discarded or published. Default: any.',
  },
  'saga-id': { type: 'string', value: '<id>', help: 'Rows of one saga.' },
  ...COMMON_FILTERS,
} as const;

const INBOX_FILTERS = {
  status: {
    type: 'string',
    value: '<status>',
    help: 'pending, leased, dead_lettered, delivered, duplicate or ignored. Default: any.',
  },
  'saga-key': { type: 'string', value: '<value>', help: 'Deliveries to one saga: its correlation value, as text.' },
  ...COMMON_FILTERS,
} as const;

function rowQuery(input: CliInput): DispatchRowQuery {
  return {
    status: text(input, 'status') as DispatchRowStatus | undefined,
    sagaType: text(input, 'type'),
    sagaId: text(input, 'saga-id'),
    sagaKey: text(input, 'saga-key'),
    messageType: text(input, 'message-type'),
    name: text(input, 'name'),
    limit: integer(input, 'limit', DEFAULT_CLI_LIMIT)!,
    cursor: text(input, 'cursor'),
  };
}

/** A bulk result: one line per id (with the error class of a `failed` one), then the counts; exit 1 unless every row was changed. */
function bulkOutput(result: BulkResult) {
  const failed = result.items.some((item) => item.error !== undefined);
  const table = formatTable(
    failed ? ['id', 'result', 'error'] : ['id', 'result'],
    result.items.map((item) => (failed ? [item.id, item.status, item.error] : [item.id, item.status])),
  );
  const exitCode = result.affected === result.requested ? CLI_EXIT_CODES.OK : CLI_EXIT_CODES.FAILURE;
  return { data: result, text: `${table}\n${result.affected} of ${result.requested} changed`, exitCode };
}

/** `--due`, which `timers reschedule` requires. */
function requiredDue(input: CliInput): Date {
  const due = dueInstant(input, 'due');
  if (!due) throw new CliUsageError('--due is required: the new due time (ISO 8601, now, or +2h).');
  return due;
}

const BULK_DETAILS = 'One result per id; exits 1 unless every row was changed.';

/** The `timers ...` commands. */
export const TIMER_COMMANDS: readonly CliCommand[] = [
  {
    name: 'timers list',
    summary: 'Timers, newest first, filtered in SQL; the ERROR column says why a timer failed or was dead-lettered.',
    options: { ...ROW_FILTERS, name: { type: 'string', value: '<name>', help: 'Timers of one name.' } },
    async run({ ops }, input) {
      const page = await ops.listTimers(rowQuery(input));
      return { data: page, text: withNextPage(timerTable(page.items), page.nextCursor) };
    },
  },
  {
    name: 'timers requeue',
    args: '<id>...',
    summary: 'Put dead-lettered timers back in the pending set: due now, attempts 0, new token.',
    details: `A timer whose name is pending again on its saga (conflict), or whose saga is completed or gone (saga_completed, saga_not_found), stays dead-lettered. ${BULK_DETAILS}`,
    options: {},
    confirm: (input) => `Requeue ${input.positionals.length} dead-lettered timer(s)?`,
    run: async ({ ops }, input) => bulkOutput(await ops.requeueTimers(ids(input))),
  },
  {
    name: 'timers cancel',
    args: '<id>...',
    summary: 'Delete pending timers.',
    details: BULK_DETAILS,
    options: {},
    confirm: (input) => `Cancel (delete) ${input.positionals.length} pending timer(s)?`,
    run: async ({ ops }, input) => bulkOutput(await ops.cancelTimers(ids(input))),
  },
  {
    name: 'timers reschedule',
    args: '<id>...',
    summary: 'Move pending timers to a new due time, with a new token.',
    details: BULK_DETAILS,
    options: {
      due: {
        type: 'string',
        value: '<date>',
        help: 'The new due time (required): ISO 8601, now, or a time from now: +2h or "in 2h" (ms, s, m, h, d).',
      },
    },
    validate: (input) => void requiredDue(input),
    confirm: (input) => `Reschedule ${input.positionals.length} pending timer(s) to ${requiredDue(input).toISOString()}?`,
    run: async ({ ops }, input) => bulkOutput(await ops.rescheduleTimers(ids(input), requiredDue(input))),
  },
];

/** The `outbox ...` commands. */
export const OUTBOX_COMMANDS: readonly CliCommand[] = [
  {
    name: 'outbox list',
    summary: 'Outbox rows, newest first, filtered in SQL; the ERROR column says why a publish failed.',
    options: ROW_FILTERS,
    async run({ ops }, input) {
      const page = await ops.listOutbox(rowQuery(input));
      return { data: page, text: withNextPage(outboxTable(page.items), page.nextCursor) };
    },
  },
  {
    name: 'outbox requeue',
    args: '<id>...',
    summary: 'Put dead-lettered outbox rows back in the pending set: available now, attempts 0, new token.',
    details: BULK_DETAILS,
    options: {},
    confirm: (input) => `Requeue ${input.positionals.length} dead-lettered outbox row(s)?`,
    run: async ({ ops }, input) => bulkOutput(await ops.requeueOutbox(ids(input))),
  },
];

/** The `inbox ...` commands: the deliveries the application staged for its sagas (`stageDelivery()`). */
export const INBOX_COMMANDS: readonly CliCommand[] = [
  {
    name: 'inbox list',
    summary: 'Staged deliveries, newest first, filtered in SQL; the ERROR column says why a delivery failed.',
    details: "A saga's deliveries run one at a time in commit order: a pending one holds the later ones of its saga.",
    options: INBOX_FILTERS,
    async run({ ops }, input) {
      const page = await ops.listInbox(rowQuery(input));
      return { data: page, text: withNextPage(inboxTable(page.items), page.nextCursor) };
    },
  },
  {
    name: 'inbox requeue',
    args: '<id>...',
    summary: 'Put dead-lettered staged deliveries back in the pending set: due now, attempts 0, new token.',
    details: `A requeued delivery keeps its place among its saga's deliveries. ${BULK_DETAILS}`,
    options: {},
    confirm: (input) => `Requeue ${input.positionals.length} dead-lettered staged delivery(ies)?`,
    run: async ({ ops }, input) => bulkOutput(await ops.requeueInbox(ids(input))),
  },
];
