// The app's MikroORM config where the MikroORM guide keeps it: src/mikro-orm.config.ts, importing the app's
// modules by their `.js` names. SAGA_APP_DIALECT and SAGA_APP_DB say which test database to open.
import type { Options } from '@mikro-orm/core';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_ENTITIES } from 'mikro-orm-saga';
import { OrderSagaSchema } from './order-saga.js';

const location: string = process.env.SAGA_APP_DB ?? 'app.sqlite';
const common: Options = { entities: [...SAGA_ENTITIES, OrderSagaSchema] };

export default process.env.SAGA_APP_DIALECT === 'postgresql'
  ? { ...common, driver: PostgreSqlDriver, clientUrl: location }
  : { ...common, driver: SqliteDriver, dbName: location };
