// The only way into src/orm from the rest of the library: exactly what the rest of src uses. MikroORM's majors differ
// behind `UnitTransactions` (one implementation per major, chosen once by `createUnitTransactions`); the rest is the
// same on both.
export { loadOrmConfig, ORM_CONFIG_MODULES } from './config-loader.js';
export { configuredDbName, isReachable, platformNames, serverAddress } from './connection-info.js';
export { createUnitTransactions } from './create-unit-transactions.js';
export { findRowsByPrimaryKey, hydrateRow, readRowBy, readsRowsDirectly, rowReadSql } from './direct-reads.js';
export {
  classifyDriverError,
  conflictKind,
  convertDriverError,
  type DriverErrorKind,
  isDriverException,
  isNeverSent,
  isRefusedByServer,
} from './driver-errors.js';
export {
  allEntityMetadata,
  entityMetadata,
  indexExpression,
  isScalarProperty,
  qualifiedTableName,
  quoteName,
  sameOrm,
  storedProperties,
  tableOf,
  uniqueKeyNamesOf,
} from './metadata.js';
export { type NotificationConnection, openNotificationConnection } from './notification-connection.js';
// executeSql and queryRows are imported by src/sql/sql-executor.ts alone, from ./sql-execution.js (.dependency-cruiser.cjs).
export { isOrmClosed, OrmClosed, type OrmCloseWatch, untilOrmClosed, watchOrmClose } from './orm-close-watch.js';
export { type ColumnValue, computeChangeSetsOnce, markWritten, plainRowUpdate, recordInsertedNulls } from './plain-update.js';
export { freshFork, inFreshTransaction } from './sql-execution.js';
export {
  CommitNotSent,
  CommitRolledBack,
  CommitSubscriberThrew,
  type JoinedTransaction,
  type SqlStatement,
  type UnitTransaction,
  type UnitTransactions,
} from './unit-transaction.js';
