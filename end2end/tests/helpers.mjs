import { chromium } from 'playwright-core';

export const BASE = process.env.E2E_BASE_URL ?? 'http://127.0.0.1:3100';
export const USER = process.env.E2E_USER ?? 'e2e';
export const PASSWORD = process.env.E2E_PASSWORD ?? 'e2e-password';
export const ARTIFACTS = process.env.E2E_ARTIFACTS ?? 'test-results';

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

// Waits until the page's wasm has taken over (frontend/src/lib.rs marks the body): typing into a
// server-rendered form before that is lost when hydration attaches the inputs to their signals.
export async function hydrated(page) {
  await page.waitForSelector('body[data-hydrated]', { state: 'attached' });
}

export async function signIn(page, user = USER, password = PASSWORD) {
  await page.goto(`${BASE}/login`);
  await hydrated(page);
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}
