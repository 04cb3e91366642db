import type { EntityMetadata, EntityProperty } from '@mikro-orm/core';
import { SagaState } from '../entities/saga-state.js';
import { SagaDefinitionError } from '../errors.js';
import { entityMetadata, isScalarProperty } from '../orm/index.js';
import { correlationCheckFor } from './correlation-value.js';
import { definitionProblem } from './define-saga.js';
import type { AnySagaDefinition, RegisteredSaga } from './registered-saga.js';
import type { ResolvedSagaRuntimeOptions } from './runtime-options.js';
import { stateValuesCheckFor } from './state-values.js';

/**
 * Checks every definition of `options.sagas` against MikroORM's metadata; returns them by name.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when a value is not a definition, two share a name, or a
 *   definition does not fit its state entity ({@link registerSaga}).
 */
export function registerSagas(options: ResolvedSagaRuntimeOptions): Map<string, RegisteredSaga> {
  const sagas = new Map<string, RegisteredSaga>();
  for (const [index, definition] of options.sagas.entries()) {
    const problem = definitionProblem(definition);
    if (problem) {
      throw new SagaDefinitionError('DEFINITION_INVALID', `sagas[${index}] ${problem}: pass the definitions defineSaga() returned.`);
    }
    if (sagas.has(definition.name)) {
      throw new SagaDefinitionError('DEFINITION_INVALID', `Two sagas are named '${definition.name}': saga names must be unique.`, {
        sagaType: definition.name,
      });
    }
    sagas.set(definition.name, registerSaga(definition, options));
  }
  return sagas;
}

/** What the checks of one definition report a mismatch with. */
interface Check {
  readonly definition: AnySagaDefinition;
  readonly className: string;
  readonly fail: (message: string) => never;
}

/**
 * Checks `definition` against its state entity: registered in MikroORM, extends `SagaState`, a unique correlation
 * property, a string `stepProperty`.
 * @throws SagaDefinitionError `DEFINITION_INVALID` naming what does not fit.
 */
function registerSaga(definition: AnySagaDefinition, options: ResolvedSagaRuntimeOptions): RegisteredSaga {
  const fail = (message: string): never => {
    throw new SagaDefinitionError('DEFINITION_INVALID', message, { sagaType: definition.name });
  };
  const check: Check = { definition, className: definition.state?.name ?? String(definition.state), fail };
  const meta = entityMetadata(options.em, definition.state);
  if (!meta) {
    fail(`Saga ${definition.name}: entity ${check.className} is not registered in MikroORM: add it to the 'entities' of your ORM config.`);
  }
  if (!(definition.state.prototype instanceof SagaState)) {
    fail(`Saga ${definition.name}: entity ${check.className} must extend SagaState from mikro-orm-saga.`);
  }
  const property = correlationProperty(check, meta!);
  checkStepProperty(check, meta!);
  return {
    definition,
    meta: meta!,
    checkCorrelation: correlationCheckFor(definition.name, property),
    checkStateValues: stateValuesCheckFor(meta!),
    settings: {
      calendars: options.calendars,
      maxPayloadBytes: options.maxPayloadBytes,
      knownMessageTypes: new Set(definition.steps.keys()),
      stepScopedByDefault: definition.stepProperty !== undefined,
    },
  };
}

/** The correlation property: it must exist and be unique, or two start messages could create two instances. */
function correlationProperty({ definition, className, fail }: Check, meta: EntityMetadata): EntityProperty {
  const property = meta.properties[definition.correlationProperty];
  if (!property) fail(`Saga ${definition.name}: ${className} has no property '${definition.correlationProperty}' to correlate on.`);
  const unique =
    property!.primary ||
    property!.unique === true ||
    typeof property!.unique === 'string' ||
    meta.uniques.some((u) => [u.properties].flat().length === 1 && [u.properties].flat()[0] === property!.name);
  if (!unique) {
    fail(
      `Saga ${definition.name}: correlation property ${className}.${property!.name} is not unique, so two start messages could create two instances: declare it with @Property({ unique: true }).`,
    );
  }
  return property!;
}

/** The `stepProperty`, when the definition has one: it must exist and be a string. */
function checkStepProperty({ definition, className, fail }: Check, meta: EntityMetadata): void {
  if (definition.stepProperty === undefined) return;
  const step = meta.properties[definition.stepProperty];
  if (!step) fail(`Saga ${definition.name}: ${className} has no property '${definition.stepProperty}' (stepProperty).`);
  // Timers record the step as text and compare it with the stored step: only a string compares truthfully.
  if (step!.runtimeType !== 'string' || !isScalarProperty(step!)) {
    fail(
      `Saga ${definition.name}: stepProperty ${className}.${definition.stepProperty} must be a string property (it is ${step!.runtimeType ?? step!.kind}): declare it with @Property({ type: 'string' }) or name another property.`,
    );
  }
}
