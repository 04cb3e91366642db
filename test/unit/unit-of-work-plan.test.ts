// Unit tests of the unit of work's pure phases: the plan and its statement order. No database.
import type { EntityMetadata } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import type { SagaState } from '../../src/entities/saga-state.js';
import { RecordingStepContext } from '../../src/saga/step-context.js';
import type { LoadedInstance } from '../../src/saga/unit-of-work/load-instance.js';
import { statementsOf } from '../../src/saga/unit-of-work/plan-statements.js';
import { type PlanInput, planTimerRetirement, planWrites } from '../../src/saga/unit-of-work/plan-writes.js';
import type { StepRun } from '../../src/saga/unit-of-work/run-step.js';
import type { DatabaseContext } from '../../src/sql/database-context.js';
import { truncate } from '../../src/text/truncate.js';

const now = new Date('2026-01-01T00:00:00Z');
const meta = { tableName: 'order_saga' } as EntityMetadata;

/** The part of a database context the statement order reads: the tables' names and one capability (nothing runs). */
function contextOf(updatesInWith = false): DatabaseContext {
  const names = (name: string) => ({ name, table: `"${name}"`, column: {} });
  const tables = { timer: names('saga_timer'), outbox: names('saga_outbox'), handledMessage: names('saga_handled_message') };
  return { dialect: { updatesInWith }, tables: { ...tables, saga: () => names(meta.tableName) } } as unknown as DatabaseContext;
}

function input(overrides: { isNew?: boolean; changed?: boolean; step?: string; completed?: boolean; completedBefore?: boolean } = {}) {
  const ctx = new RecordingStepContext(
    {
      sagaType: 'order',
      sagaId: 'saga-1',
      isNew: overrides.isNew ?? false,
      now,
      correlationId: 'c'.repeat(300),
      timer: undefined,
      completed: false,
    },
    {
      calendars: new Map(),
      maxPayloadBytes: 1000,
      knownMessageTypes: new Set(['Tick']),
      stepScopedByDefault: true,
    },
  );
  const instance: LoadedInstance = {
    kind: 'loaded',
    state: { id: 'saga-1' } as SagaState,
    isNew: overrides.isNew ?? false,
    before: { version: 3, completed: overrides.completedBefore ?? false, step: 'open' },
  };
  const run: StepRun = {
    ctx,
    changed: overrides.changed ?? false,
    completed: overrides.completed ?? false,
    step: overrides.step ?? 'open',
  };
  const planInput: PlanInput = {
    sagaType: 'order',
    hasStepProperty: true,
    instance,
    run,
    message: { type: 'Do' },
    timer: undefined,
    now,
    correlationId: ctx.correlationId,
    traceContext: null,
    messageId: undefined,
  };
  return { ctx, planInput };
}

describe('planWrites', () => {
  it('plans nothing for a step that changed nothing and asked for nothing', () => {
    expect(planWrites(input().planInput)).toBeUndefined();
  });

  it('bumps the version of a changed row and stamps updated_at with the clock', () => {
    const plan = planWrites(input({ changed: true }).planInput);
    expect(plan?.sagaRow).toEqual({ kind: 'update', loadedVersion: 3, version: 4, updatedAt: now });
  });

  it('guards the version when only timers or messages are written, and cuts the correlation id to its column', () => {
    const { ctx, planInput } = input();
    ctx.schedule('t', 1000, { type: 'Tick' });
    const plan = planWrites(planInput);
    expect(plan?.sagaRow).toEqual({ kind: 'guard', loadedVersion: 3 });
    expect(plan?.timers).toMatchObject([{ name: 't', step: 'open', dueAt: new Date(now.getTime() + 1000) }]);
    expect(plan?.timers[0]?.correlationId).toHaveLength(200);
  });

  it('a completing step deletes every pending timer and discards what it scheduled', () => {
    const { ctx, planInput } = input({ changed: true, completed: true });
    ctx.schedule('t', 1000, { type: 'Tick' });
    const plan = planWrites(planInput);
    expect(plan).toMatchObject({ timers: [], timerDeletes: { all: true } });
  });

  it('a step change deletes the step-scoped timers of other steps', () => {
    const plan = planWrites(input({ changed: true, step: 'paying' }).planInput);
    expect(plan?.timerDeletes).toEqual({ all: false, names: [], otherStepsThan: { step: 'paying' } });
  });

  it('a message id is recorded with the version the unit produces, even when nothing else is written', () => {
    const unchanged = planWrites({ ...input().planInput, messageId: 'm-1' });
    expect(unchanged).toMatchObject({ sagaRow: { kind: 'guard', loadedVersion: 3 }, handledMessage: { messageId: 'm-1', version: 3 } });
    const changed = planWrites({ ...input({ changed: true }).planInput, messageId: 'm-2' });
    expect(changed?.handledMessage).toMatchObject({ sagaId: 'saga-1', messageId: 'm-2', version: 4, processedAt: now });
    const started = planWrites({ ...input({ isNew: true, changed: true }).planInput, messageId: 'm-3' });
    expect(started?.handledMessage).toMatchObject({ version: 0 });
  });

  it('a new instance is inserted and deletes nothing', () => {
    const plan = planWrites(input({ isNew: true, changed: true, step: 'paying' }).planInput);
    expect(plan).toMatchObject({ sagaRow: { kind: 'insert' }, replaceTimers: false, timerDeletes: { all: false, names: [] } });
  });
});

describe('statementsOf', () => {
  it('orders the saga row, the lock of its timers, the timer stamp, deletes, timer writes, the outbox and the message id', () => {
    const { ctx, planInput } = input({ changed: true, step: 'paying' });
    ctx.cancel('old');
    ctx.schedule('t', 1000, { type: 'Tick' });
    ctx.send({ type: 'Out' });
    const timer = { id: 't1', token: 'k', sagaType: 'order', sagaId: 'saga-1', name: 'x' } as never;
    const plan = planWrites({ ...planInput, timer, messageId: 'm-1' })!;
    const order = statementsOf(contextOf(), plan, { state: undefined, meta }).map((s) => `${s.operation} ${s.table}`);
    expect(order).toEqual([
      'update order_saga',
      // several existing timer rows written: all pending ones locked first, in id order (PostgreSQL only)
      'lock saga_timer',
      'update saga_timer',
      'delete saga_timer',
      'delete saga_timer',
      'update saga_timer',
      'insert saga_timer',
      'insert saga_outbox',
      'insert saga_handled_message',
    ]);
  });

  it("where WITH queries can be UPDATEs, the saga row and the delivered timer's stamp are one statement, unless timer rows are locked between", () => {
    const timer = { id: 't1', token: 'k', sagaType: 'order', sagaId: 'saga-1', name: 'x' } as never;
    const names = (plan: Parameters<typeof statementsOf>[1], updatesInWith: boolean) =>
      statementsOf(contextOf(updatesInWith), plan, { state: undefined, meta }).map(
        (s) => `${s.operation} ${s.table}${s.alsoTable ? ` + ${s.alsoTable}` : ''}`,
      );
    const changed = input({ changed: true });
    changed.ctx.send({ type: 'Out' });
    const plan = planWrites({ ...changed.planInput, timer })!;
    expect(names(plan, true)).toEqual(['update order_saga + saga_timer', 'insert saga_outbox']);
    expect(names(plan, false)).toEqual(['update order_saga', 'update saga_timer', 'insert saga_outbox']);
    // The delivery cancels another timer: the saga's pending timers are locked after the saga row, before the stamp.
    const cancelling = input({ changed: true });
    cancelling.ctx.cancel('old');
    expect(names(planWrites({ ...cancelling.planInput, timer })!, true)).toEqual([
      'update order_saga',
      'lock saga_timer',
      'update saga_timer',
      'delete saga_timer',
    ]);
    // A retired timer writes no saga row: its stamp stays a statement of its own.
    expect(names(planTimerRetirement(timer, 'Tick', now), true)).toEqual(['update saga_timer']);
  });

  it('a retired timer is one token-checked stamp and nothing else', () => {
    const timer = { id: 't1', token: 'k', sagaType: 'order', sagaId: 'saga-1', name: 'x' } as never;
    const order = statementsOf(contextOf(), planTimerRetirement(timer, 'Tick', now), { state: undefined, meta }).map(
      (s) => `${s.operation} ${s.table}`,
    );
    expect(order).toEqual(['update saga_timer']);
  });
});

describe('truncate', () => {
  it('keeps short text, cuts long text with an ellipsis and never splits a surrogate pair', () => {
    expect(truncate('abc', 3)).toBe('abc');
    expect(truncate('abcdef', 4)).toBe('abc…');
    expect(truncate('ab😀cd', 4)).toBe('ab…');
  });
});
