// On SQLite through MikroORM 6 (knex: node-sqlite3 and better-sqlite3) a unit's BEGIN waits for the unit's first
// statement (src/orm/mikro-orm-6/knex-held-transaction.ts, queryAfterDeferredBegin): a unit whose whole write is one statement sends it alone,
// where it commits itself (SQLite runs it as a transaction of its own: all or nothing), without BEGIN and COMMIT; a
// group's transaction opens with its first unit's SAVEPOINT. Observed at the driver: what knex hands SQLite.
import type { EventSubscriber } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { queryRows } from '../../../src/orm/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { kinds, recordStatements } from '../../support/sqlite-statements.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe.runIf(ORM_MAJOR === 6)(`a unit's BEGIN waits for its first statement on SQLite (${dialect}, MikroORM 6)`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const stops: (() => void)[] = [];
    afterEach(() => {
      for (const stop of stops.splice(0)) stop();
    });
    const record = () => {
      const recorder = recordStatements(db().orm);
      stops.push(recorder.stop);
      return recorder.sent;
    };

    it('a message whose write is one UPDATE sends it alone, without BEGIN or COMMIT, and it is committed', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('alone');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(kinds(sent)).toEqual(['select', 'update']);
      // Read on another connection: committed, not left in an open transaction.
      const other = await db().openAnother();
      try {
        expect((await rowsOf(other).saga(key))?.counter).toBe(1);
      } finally {
        await other.close(true);
      }
    });

    it('with a subscriber listening to the transaction, the UPDATE goes between BEGIN and COMMIT', async () => {
      const orm = await db().openAnother();
      try {
        const committed: string[] = [];
        orm.em
          .getEventManager()
          .registerSubscriber({ afterTransactionCommit: async () => void committed.push('commit') } as EventSubscriber);
        const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
        const key = uniqueKey('subscribed');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const recorder = recordStatements(orm);
        stops.push(recorder.stop);
        committed.length = 0;
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        expect(kinds(recorder.sent)).toEqual(['select', 'begin', 'update', 'commit']);
        expect(committed).toEqual(['commit']);
        expect((await rowsOf(orm).saga(key))?.counter).toBe(1);
      } finally {
        await orm.close(true);
      }
    });

    it('a lone UPDATE the database refuses began nothing: no ROLLBACK, nothing written, and the same connection carries the next unit', async () => {
      const { orm } = db();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('refused');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      // A temporary table lives as long as its connection: still there afterwards, the connection was not replaced.
      await queryRows(orm.em, 'create temp table connection_marker (id integer)', []);
      await queryRows(
        orm.em,
        `create trigger refuse_note before update on scripted_saga when new.log like '%refused;%' begin select raise(abort, 'note refused'); end`,
        [],
      );
      try {
        const sent = record();
        const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'refused' }] }).catch((e) => e);
        expect(error).toBeInstanceOf(SagaPersistenceError);
        // The load, the refused UPDATE, then only reads (the failure's diagnosis): no BEGIN, no ROLLBACK.
        expect(kinds(sent).slice(0, 2)).toEqual(['select', 'update']);
        expect(
          kinds(sent)
            .slice(2)
            .every((kind) => kind === 'select'),
        ).toBe(true);
      } finally {
        await queryRows(orm.em, 'drop trigger refuse_note', []);
      }
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
      expect((await rowsOf(orm).saga(key))?.log).not.toContain('refused');
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await rowsOf(orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
      expect(await queryRows(orm.em, 'select count(*) as n from connection_marker', [])).toEqual([{ n: 0 }]);
    });

    it("a group's transaction opens with its first unit's SAVEPOINT: no BEGIN is sent, and every unit is committed", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const keys = Array.from({ length: 8 }, (_, i) => uniqueKey(`group-${i}`));
      for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record();
      await Promise.all(keys.map((key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })));
      const statements = kinds(sent);
      expect(statements).not.toContain('begin');
      // Units queued behind the first formed at least one group: its transaction began with a SAVEPOINT.
      expect(statements).toContain('savepoint');
      for (let at = statements.indexOf('commit'); at >= 0; at = statements.indexOf('commit', at + 1)) {
        const opened = statements.lastIndexOf('savepoint', at);
        expect(opened, 'every COMMIT closes a transaction a SAVEPOINT opened').toBeGreaterThanOrEqual(0);
      }
      for (const key of keys) expect((await rowsOf(db().orm).saga(key))?.counter).toBe(1);
    });
  });
}
