#!/usr/bin/env bash
# Build rlkit's cluster runtime (deploy/Dockerfile) from the repo root, check it, push it to ECR.
#
#   deploy/build-image.sh                       # ACCOUNT/REGION from the AWS CLI's defaults
#   REGION=us-west-2 TAG=0.4.0 deploy/build-image.sh
#   PUSH=0 deploy/build-image.sh                # build and check only
#
# Needs Docker (SageMaker Studio has none: use a laptop, an EC2 instance or CodeBuild), the AWS
# CLI with ecr:CreateRepository/GetAuthorizationToken/*Layer*/PutImage rights. Then pass the
# printed name to the manifest writers: rlkit submit ... --raycluster FILE --image NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
REGION=${REGION:-$(aws configure get region)}
ACCOUNT=${ACCOUNT:-$(aws sts get-caller-identity --query Account --output text)}
REPO=${REPO:-rlkit-skyrl}
TAG=${TAG:-skyrl-0.4.0}
IMAGE="${ACCOUNT}.dkr.ecr.${REGION}.amazonaws.com/${REPO}:${TAG}"

docker build -f deploy/Dockerfile -t "${IMAGE}" .
# the image's own checks ran at build time; one more from outside: the job's entrypoint
docker run --rm "${IMAGE}" python -m rlkit.cluster.skyrl.entry --help >/dev/null

if [ "${PUSH:-1}" = 1 ]; then
  aws ecr describe-repositories --repository-names "${REPO}" --region "${REGION}" >/dev/null 2>&1 \
    || aws ecr create-repository --repository-name "${REPO}" --region "${REGION}" >/dev/null
  aws ecr get-login-password --region "${REGION}" \
    | docker login --username AWS --password-stdin "${ACCOUNT}.dkr.ecr.${REGION}.amazonaws.com"
  docker push "${IMAGE}"
fi
echo "${IMAGE}"
