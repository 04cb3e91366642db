// A lost COMMIT acknowledgement on PostgreSQL: the caller cannot know whether the unit of work committed;
// redelivering the message with the same id is safe and applies it once.
import { describe, expect, it } from 'vitest';
import { SagaError, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { CommitDroppingProxy } from '../support/tcp-proxy.js';

describe('idempotent handling after a lost commit acknowledgement (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('the commit outcome is reported unknown, and redelivering the same id applies the message once', async () => {
    const target = new URL(db().config.clientUrl as string);
    const proxy = new CommitDroppingProxy(target.hostname, Number(target.port || 5432));
    target.host = `127.0.0.1:${await proxy.listen()}`;
    const viaProxy = await db().openAnother({ clientUrl: target.toString(), pool: { min: 0, max: 2 } });
    try {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: viaProxy.em, sagas: [scriptedSaga], clock });
      const rows = rowsOf(db().orm);
      const key = uniqueKey('lost-ack');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const message = { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Counted' } }] } as const;

      proxy.arm('drop-after-commit');
      const failure = await runtime.handle(scriptedSaga, message, { messageId: `${key}-m` }).catch((error: unknown) => error);
      await proxy.faulted;
      expect(failure).toBeInstanceOf(SagaError);
      expect(failure).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN' });
      expect((failure as Error).message).not.toMatch(/nothing (of it )?was written/i);
      // It did commit.
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1 });

      // The caller retries as told: same message id, through a fresh connection.
      const again = await runtime.handle(scriptedSaga, message, { messageId: `${key}-m` });
      expect(again).toMatchObject({ outcome: 'duplicate', version: 1 });
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.outbox(saga!.id)).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });
});
