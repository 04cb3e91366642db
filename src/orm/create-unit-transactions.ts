import { mikroOrm6Transactions } from './mikro-orm-6/unit-transactions.js';
import { mikroOrm7Transactions } from './mikro-orm-7/unit-transactions.js';
import { ORM_MAJOR } from './orm-major.js';
import type { UnitTransactions } from './unit-transaction.js';

/** The unit transactions of the installed MikroORM major: chosen once, when a runtime's database context is built. */
export function createUnitTransactions(): UnitTransactions {
  return ORM_MAJOR === 6 ? mikroOrm6Transactions() : mikroOrm7Transactions();
}
