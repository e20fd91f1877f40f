// Reads the clocks the way handlers do: Date, performance.now() and a timer's real wait.
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export default async function handler() {
  const iso = new Date().toISOString();
  const wallBefore = Date.now();
  const monoBefore = performance.now();
  await sleep(200);
  return {
    iso,
    wall: wallBefore,
    mono: monoBefore,
    sleptWall: Date.now() - wallBefore,
    sleptMono: performance.now() - monoBefore,
    timeOrigin: performance.timeOrigin,
  };
}
