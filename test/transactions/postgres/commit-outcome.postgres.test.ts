// The outcome of a unit's COMMIT on PostgreSQL: one whose answer was lost is reported unknown (COMMIT_OUTCOME_UNKNOWN),
// never as "nothing was written"; one that never reached the server (the connection dropped at BEGIN, or the session
// ended before the unit sent anything) is a known failure with nothing written. SQLite runs COMMIT in-process: it
// returns or leaves the transaction uncommitted, so its outcome is always known
// (DialectAdapter.commitCanFailAfterApplying is false there; a failed COMMIT is classified like any other write).

import type { MikroORM, Options } from '@mikro-orm/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type SagaLogger, SagaPersistenceError, SagaRuntime, silentLogger } from '../../../src/index.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';
import { CommitDroppingProxy } from '../../support/tcp-proxy.js';
import { AfterStart } from '../../support/transaction-hooks.js';

describe('commit outcome unknown (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  let proxy: CommitDroppingProxy;
  let proxyUrl: string;
  beforeAll(async () => {
    const target = new URL(db().config.clientUrl!);
    proxy = new CommitDroppingProxy(target.hostname, Number(target.port || 5432));
    const port = await proxy.listen();
    target.host = `127.0.0.1:${port}`;
    proxyUrl = target.toString();
  });
  afterAll(async () => {
    await proxy.close();
  });

  async function runtimeThroughProxy(logger: SagaLogger = silentLogger) {
    const orm = await db().openAnother({ clientUrl: proxyUrl, pool: { min: 0, max: 1 } });
    return new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock(), logger });
  }

  it('the connection drops after the server applied COMMIT: COMMIT_OUTCOME_UNKNOWN, and the effects are in fact written', async () => {
    const errors: [string, Record<string, unknown> | undefined][] = [];
    const runtime = await runtimeThroughProxy({ ...silentLogger, error: (message, fields) => void errors.push([message, fields]) });
    const rows = rowsOf(db().orm);
    const key = uniqueKey('lost-ack');
    const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
    proxy.arm('drop-after-commit');
    const error = await runtime
      .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Charged' } }] })
      .catch((e: unknown) => e);
    await proxy.faulted;
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN', details: { sagaId: started.sagaId, operation: 'commit' } });
    const message = (error as Error).message;
    expect(message).toContain('may or may not have been written');
    expect(message).toContain('redeliver the message with the same message id');
    expect(message).not.toContain('nothing of it was written');
    // Logged as an error too, for an operator whose caller swallowed it.
    expect(errors).toEqual([
      [
        'commit outcome unknown: the unit of work may or may not be written',
        { sagaType: 'scripted', sagaId: started.sagaId, messageType: 'Do', error: expect.any(String) },
      ],
    ]);
    // What a caller who believed "nothing was written" would have duplicated:
    expect(await rows.saga(key)).toMatchObject({ version: 1, counter: 1 });
    expect(await rows.outbox(started.sagaId!)).toHaveLength(1);
    // The runtime recovers: the next message runs on a new connection.
    expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 2 });
  });

  it('the COMMIT_OUTCOME_UNKNOWN message of a connection lost at COMMIT names the lost connection first, and no subscriber', async () => {
    const runtime = await runtimeThroughProxy();
    const key = uniqueKey('lost-message');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    proxy.arm('drop-after-commit');
    const actions = [{ op: 'inc' }, { op: 'send', message: { type: 'Charged' } }] as const;
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions }).catch((e: unknown) => e);
    await proxy.faulted;
    expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN' });
    expect((error as Error).message).toMatch(
      /^Saga scripted\/[0-9a-f-]+: the connection failed while COMMIT of the effects of 'Do' was in flight/,
    );
    expect((error as Error).message).not.toContain('subscriber');
  });

  it('the connection drops before COMMIT reached the server: also COMMIT_OUTCOME_UNKNOWN (the client cannot tell), nothing written', async () => {
    const runtime = await runtimeThroughProxy();
    const rows = rowsOf(db().orm);
    const key = uniqueKey('lost-commit');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    proxy.arm('drop-before-commit');
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch((e: unknown) => e);
    await proxy.faulted;
    expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN' });
    expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
    // The broken connection went back to the pool of one (and was destroyed there): the next unit of work runs.
    expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 1 });
  });

  it('a unit of one statement (BEGIN, UPDATE and COMMIT in one round trip on MikroORM 6) whose answer is lost: COMMIT_OUTCOME_UNKNOWN, and written', async () => {
    const runtime = await runtimeThroughProxy();
    const rows = rowsOf(db().orm);
    const key = uniqueKey('lost-one');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    proxy.arm('drop-after-commit');
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch((e: unknown) => e);
    await proxy.faulted;
    expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN', details: { operation: 'commit' } });
    expect((error as Error).message).not.toContain('nothing of it was written');
    expect(await rows.saga(key)).toMatchObject({ version: 1, counter: 1 });
    expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 2 });
  });

  it('the connection drops at BEGIN: PERSISTENCE_FAILED, nothing written, and the pool of one serves the next message', async () => {
    const runtime = await runtimeThroughProxy();
    const rows = rowsOf(db().orm);
    const key = uniqueKey('lost-begin');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    proxy.arm('drop-at-begin');
    // Two statements (the saga row and an outbox row): COMMIT goes on its own, so BEGIN is known not to have committed.
    const actions = [{ op: 'inc' }, { op: 'send', message: { type: 'Charged' } }] as const;
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions }).catch((e: unknown) => e);
    await proxy.faulted;
    // The database still answers on a new connection, so this is not DATABASE_UNREACHABLE. (On MikroORM 6 BEGIN goes
    // with the first statement, so the failed operation is 'update' there and 'begin' on 7.)
    expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED' });
    expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
    expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 1 });
  });
});

describe('a unit whose session ended before it sent anything (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  // The session ends (pg_terminate_backend, a restart, an idle-session timeout) after the connection was taken from
  // the pool, before the unit sent anything: its BEGIN + UPDATE + COMMIT string is never sent (pg refuses a client
  // whose connection failed, with no SQLSTATE). The outcome is known: nothing was written, the message can be handled
  // again at once; a failure without a server's error code must not be taken for COMMIT's.
  it('reports a known outcome (not COMMIT_OUTCOME_UNKNOWN) and writes nothing', async () => {
    const orm = await db().openAnother({ pool: { min: 0, max: 1 } } as Partial<Options>);
    opened.push(orm);
    const afterStart = new AfterStart();
    orm.em.getEventManager().registerSubscriber(afterStart);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('ended-session');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    // The pool's only connection: the one the next unit takes.
    const [{ pid }] = (await queryRows<{ pid: number }>(orm.em.fork(), 'select pg_backend_pid() as pid', [])) as [{ pid: number }];
    const other = db().orm.em;
    afterStart.work = async () => {
      await queryRows(other.fork(), `select pg_terminate_backend(${pid})`, []);
      // Until the backend has gone (its FATAL message sent), then one more round trip so the client reads it.
      for (;;) {
        const [row] = await queryRows<{ n: number }>(
          other.fork(),
          `select count(*)::int as n from pg_stat_activity where pid = ${pid}`,
          [],
        );
        if (row!.n === 0) break;
      }
      await queryRows(other.fork(), 'select 1', []);
    };
    const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(afterStart.work).toBeUndefined();
    const [before] = await queryRows<{ counter: number }>(other.fork(), `select counter from scripted_saga where key = '${key}'`, []);
    expect(before!.counter).toBe(0);
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect((error as SagaPersistenceError).code).not.toBe('COMMIT_OUTCOME_UNKNOWN');
    // The next message is handled on a fresh connection.
    await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
    const [after] = await queryRows<{ counter: number }>(other.fork(), `select counter from scripted_saga where key = '${key}'`, []);
    expect(after!.counter).toBe(1);
  });
});
