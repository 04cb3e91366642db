import type { MikroORM } from '@mikro-orm/core';
import { afterEach } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { scriptedSaga } from '../fixtures/scripted-saga.js';
import type { TestDatabase } from './databases.js';
import { operatorSession as openOperatorSession } from './row-locks.js';
import { rowsOf } from './rows.js';
import { uniqueKey } from './suite.js';

/** A value of every message's payload: no log line may quote it. */
export const PAYLOAD_SECRET = 'S3CRET-PAYLOAD-VALUE';

/**
 * The set-up of the tests of outbox rows another transaction holds locked (PostgreSQL), for a describe block: what
 * it opens (operator sessions, dispatchers) is rolled back or stopped after each test, in reverse order.
 */
export function lockedOutbox(db: () => TestDatabase) {
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
  });

  /** An operator's session on its own MikroORM instance (test/support/row-locks.ts), rolled back after the test. */
  async function operatorSession() {
    const session = openOperatorSession(await db().openAnother());
    cleanup.push(() => session.rollback());
    return session;
  }

  /** A dispatcher on `orm` that publishes with `publish`; its warnings and errors land in `lines`. */
  function dispatcherOn(
    orm: MikroORM,
    clock: FakeClock,
    publish: (envelope: OutboxEnvelope) => Promise<void>,
    extra: Partial<ConstructorParameters<typeof SagaDispatcher>[0]> = {},
  ) {
    const lines: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: (line, fields) => void lines.push(`warn: ${line}${fields ? ` ${JSON.stringify(fields)}` : ''}`),
        error: (line, fields) => void lines.push(`error: ${line}${fields ? ` ${JSON.stringify(fields)}` : ''}`),
      },
      publish,
      ...extra,
    });
    return { dispatcher: track(dispatcher), lines };
  }

  /** Stops `dispatcher` after the test. */
  function track(dispatcher: SagaDispatcher): SagaDispatcher {
    cleanup.push(() => dispatcher.stop());
    return dispatcher;
  }

  /** Starts a saga that sends one message of `type` (with {@link PAYLOAD_SECRET} in its payload); its outbox row's id. */
  async function send(clock: FakeClock, type: string): Promise<string> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const { sagaId } = await runtime.handle(scriptedSaga, {
      type: 'Start',
      key: uniqueKey('locked'),
      actions: [{ op: 'send', message: { type, secret: PAYLOAD_SECRET } as never }],
    });
    const [row] = await rowsOf(db().orm).outbox(sagaId!);
    return row!.id;
  }

  /** A saga that sends `types` in order, one step each, 1 s apart: one lane. Returns the rows' ids in that order. */
  async function lane(clock: FakeClock, ...types: string[]): Promise<string[]> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const key = uniqueKey('lane');
    let sagaId: string | undefined;
    for (const [index, type] of types.entries()) {
      const result = await runtime.handle(scriptedSaga, {
        type: index === 0 ? 'Start' : 'Do',
        key,
        actions: [{ op: 'send', message: { type } }],
      });
      sagaId ??= result.sagaId!;
      clock.advance(1_000);
    }
    const rows = await rowsOf(db().orm).outbox(sagaId!);
    return types.map((type) => rows.find((row) => row.messageType === type)!.id);
  }

  async function outboxRow(id: string) {
    const rows = await rowsOf(db().orm).outbox();
    return rows.find((row) => row.id === id)!;
  }

  /** A runtime on a fake clock, a starter of sagas that each send one message (1 s apart), and an operator's session. */
  async function setup() {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const start = async (message: string) => {
      const result = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('lk'),
        actions: [{ op: 'send', message: { type: message } }],
      });
      clock.advance(1_000); // claimed oldest first
      return result.sagaId!;
    };
    const operator = await operatorSession();
    return { clock, runtime, start, lockRow: (id: string) => operator.lock(id), unlock: () => operator.rollback(), rows: rowsOf(db().orm) };
  }

  return { operatorSession, dispatcherOn, track, send, lane, outboxRow, setup };
}
