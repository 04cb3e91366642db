import type { EntityManager } from '@mikro-orm/core';
import { runTogether } from '../held-transaction.js';
import { joinOpenTransaction } from '../joined-transaction.js';
import { openUnitTransaction } from '../open-unit-transaction.js';
import { queryRows } from '../sql-execution.js';
import type { UnitTransaction, UnitTransactions } from '../unit-transaction.js';
import { holdKnexTransaction, knexClientOf } from './knex-held-transaction.js';

/**
 * The unit transactions of MikroORM 6: each on a connection the library takes from knex's pool and holds itself
 * (`holdKnexTransaction`); MikroORM's own `em.begin()` where `em` has no knex client.
 */
export function mikroOrm6Transactions(): UnitTransactions {
  return {
    begin(em: EntityManager): Promise<UnitTransaction> {
      const knex = knexClientOf(em);
      return openUnitTransaction(em, knex && (() => holdKnexTransaction(em, knex)));
    },
    runsStatementsTogether: (em) => knexClientOf(em)?.dialect === 'postgresql',
    /**
     * The settings and the statement go as one string, which PostgreSQL runs as one implicit transaction (one round
     * trip, as the statement alone).
     */
    async queryRowsUnder<T>(em: EntityManager, settings: readonly string[], sql: string, params: readonly unknown[]): Promise<T[]> {
      if (settings.length === 0) return queryRows<T>(em, sql, params);
      if (knexClientOf(em)?.dialect !== 'postgresql') throw new Error('statement settings are for PostgreSQL only');
      const answers = await runTogether(em, undefined, [...settings.map((setting) => ({ sql: setting, params: [] })), { sql, params }]);
      return answers.at(-1)!.rows as T[];
    },
    /** A knex transaction (MikroORM's, or a savepoint of a nested `em.transactional()`) is open until it completed. */
    async join(appEm, unitEm) {
      const context = appEm.getTransactionContext() as { isCompleted?: () => boolean } | undefined;
      const isOpen = () => context?.isCompleted?.() !== true;
      if (!context || !isOpen()) return undefined;
      return joinOpenTransaction(context, unitEm, isOpen);
    },
    /** The outermost knex transaction: a nested one's transactor names the one it is nested in (`parentTransaction`). */
    async connectionOf(appEm) {
      let context = appEm.getTransactionContext() as { parentTransaction?: object } | undefined;
      while (context?.parentTransaction) context = context.parentTransaction;
      return context;
    },
  };
}
